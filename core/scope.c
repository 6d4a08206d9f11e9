/* core/scope.c: autorelease scopes. Each thread keeps one stack of recorded tensors and
 * the stack heights at which its open scopes began. */
#include <stdlib.h>

#include "internal.h"

/* The first marks live in the stack itself, so the scopes that nest in practice never
 * allocate; deeper ones grow an array. A push that cannot grow it merges its scope into
 * the enclosing one (`merged` such scopes are open innermost): what it records is then
 * released at the enclosing pop, later but never lost, and the push needs no error. */
enum { INLINE_MARKS = 16 };

struct scope_stack {
    weft_tensor **items;
    size_t count, capacity;
    size_t inline_marks[INLINE_MARKS];
    size_t *marks; /* marks beyond the inline ones: marks[depth - INLINE_MARKS] */
    size_t mark_capacity;
    int depth, merged;
};

static WEFT_FAST_TLS struct scope_stack stack;

static bool grow(void **array, size_t *capacity, size_t elem)
{
    size_t cap = *capacity ? *capacity * 2 : 64;
    void *p = realloc(*array, cap * elem);
    if (!p)
        return false;
    *array = p;
    *capacity = cap;
    return true;
}

void weft_scope_push(void)
{
    int d = stack.depth;
    if (stack.merged == 0 && d < INLINE_MARKS) {
        stack.inline_marks[d] = stack.count;
    } else if (stack.merged == 0 &&
               ((size_t)(d - INLINE_MARKS) < stack.mark_capacity ||
                grow((void **)&stack.marks, &stack.mark_capacity, sizeof *stack.marks))) {
        stack.marks[d - INLINE_MARKS] = stack.count;
    } else {
        stack.merged++;
    }
    stack.depth++;
}

void weft_scope_pop(void)
{
    if (stack.depth == 0)
        return;
    stack.depth--;
    if (stack.merged > 0) { /* its tensors belong to the enclosing scope now */
        stack.merged--;
        return;
    }
    int d = stack.depth;
    size_t mark = d < INLINE_MARKS ? stack.inline_marks[d] : stack.marks[d - INLINE_MARKS];
    /* Release newest first, so a result dies before the inputs it was made from. */
    while (stack.count > mark)
        weft_tensor_release(stack.items[--stack.count]);
    if (stack.depth == 0) {
        free(stack.items);
        free(stack.marks);
        stack = (struct scope_stack){0};
    }
}

int weft_scope_depth(void)
{
    return stack.depth;
}

weft_tensor *weft_autorelease(weft_tensor *t)
{
    if (!t || stack.depth == 0)
        return t;
    if (stack.count == stack.capacity && !grow((void **)&stack.items, &stack.capacity,
                                               sizeof *stack.items)) {
        /* Cannot record it, and a reference nobody records is lost: fail as an op fails,
         * so the caller that hands its result on hands on NULL with the error. */
        weft_tensor_release(t);
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory recording a tensor in a scope");
        return NULL;
    }
    stack.items[stack.count++] = t;
    return t;
}

weft_tensor *weft_autorelease_shared(weft_tensor *t)
{
    bool had_error = weft_error_code() != WEFT_OK;
    weft_tensor *shared = weft_autorelease(weft_tensor_retain(t));
    if (shared || !t)
        return shared;
    if (!had_error)
        weft_error_clear();
    return t;
}

weft_tensor *weft_tensor_discard(weft_tensor *t)
{
    if (weft_scope_depth() == 0)
        weft_tensor_release(t);
    return NULL;
}
