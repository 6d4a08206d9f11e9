/* core/scope.c: autorelease scopes. Each thread keeps one stack of recorded tensors and
 * the stack heights at which its open scopes began. */
#include <stdlib.h>

#include "internal.h"

struct scope_stack {
    weft_tensor **items;
    size_t count, capacity;
    size_t *marks;
    int depth, mark_capacity;
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
    if (stack.depth == stack.mark_capacity) {
        size_t cap = (size_t)stack.mark_capacity;
        if (!grow((void **)&stack.marks, &cap, sizeof *stack.marks)) {
            weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory opening a scope");
            return;
        }
        stack.mark_capacity = (int)cap;
    }
    stack.marks[stack.depth++] = stack.count;
}

void weft_scope_pop(void)
{
    if (stack.depth == 0)
        return;
    size_t mark = stack.marks[--stack.depth];
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
        /* Cannot record it: the reference would leak. Report, keep the tensor usable. */
        weft_error_set(WEFT_ERR_OUT_OF_MEMORY, "out of host memory recording a tensor in a scope");
        return t;
    }
    stack.items[stack.count++] = t;
    return t;
}
