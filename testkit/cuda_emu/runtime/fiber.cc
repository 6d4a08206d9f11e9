/* testkit/cuda_emu/runtime/fiber.cc: the fibers' stacks and switches (fiber.h). */
#include "fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>

#include "sanitizers.h"

namespace wemu {

#if defined(__x86_64__)
/* wemu_fiber_switch(save, to): pushes the callee-saved registers, stores the stack
 * pointer in *save, loads `to` and pops the same from there. A fresh stack (fiber_reset)
 * holds that frame with entry() as the return address. The floating-point control words
 * are not switched: no device thread changes them (the ABI would let a callee). */
extern "C" void wemu_fiber_switch(void **save, void *to);
asm(".text\n"
    ".p2align 4\n"
    ".globl wemu_fiber_switch\n"
    ".hidden wemu_fiber_switch\n"
    ".type wemu_fiber_switch,@function\n"
    "wemu_fiber_switch:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r12\n"
    "    pushq %r13\n"
    "    pushq %r14\n"
    "    pushq %r15\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    popq %r15\n"
    "    popq %r14\n"
    "    popq %r13\n"
    "    popq %r12\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size wemu_fiber_switch, .-wemu_fiber_switch\n");
#endif

/* The fiber a switch comes from: a fiber without a stack of its own (the executor) learns
 * its bounds from ASan at the landing, for the switches back to it. */
static Fiber *switching_from;

bool fiber_alloc(Fiber &f, size_t size, unsigned slot)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size = (size + page - 1) / page * page;
    size_t total = size + page;
    void *m = mmap(nullptr, total, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (m == MAP_FAILED)
        return false;
    if (mprotect(m, page, PROT_NONE) != 0) { /* the guard: an overflow faults */
        munmap(m, total);
        return false;
    }
    f.map = static_cast<char *>(m);
    f.map_size = total;
    f.stack_lo = f.map + page;
    f.stack_size = size;
    /* tops 64 bytes and a page apart in turn, not all at one offset of a page */
    f.stagger = (size_t)(slot % 64) * 64 + (size_t)(slot / 64 % 8) * page;
    f.dirty = false;
    return true;
}

void fiber_free(Fiber &f)
{
    if (f.map) {
        WEMU_ASAN_UNPOISON(f.stack_lo, f.stack_size);
        munmap(f.map, f.map_size);
    }
    f.map = nullptr;
}

void fiber_reset(Fiber &f, void (*entry)())
{
    /* ASan poisons a frame's redzones when the frame starts and clears them when it
     * returns: the frames through which a finished thread switched away for good stay
     * poisoned just below the stack's top (within 500 bytes of it in gcc 12's build:
     * 2 KiB are cleaned), and a fiber left mid-kernel keeps all of its frames. */
    size_t used = f.stack_size - f.stagger;
    size_t clean = f.dirty ? used : (used < 2048 ? used : 2048);
    WEMU_ASAN_UNPOISON(f.stack_lo + used - clean, clean);
    f.dirty = false;
    f.asan_fake = nullptr;
#if defined(__x86_64__)
    /* top 16-aligned; entry starts as if called: rsp = 8 mod 16 */
    uintptr_t top = ((uintptr_t)(f.stack_lo + f.stack_size - f.stagger)) & ~(uintptr_t)15;
    uint64_t *s = reinterpret_cast<uint64_t *>(top);
    *--s = 0;                          /* entry's return address: none */
    *--s = (uint64_t)(uintptr_t)entry; /* wemu_fiber_switch's ret */
    for (int i = 0; i < 6; i++)
        *--s = 0;                      /* rbp rbx r12 r13 r14 r15 */
    f.sp = s;
#else
    getcontext(&f.uc);
    f.uc.uc_stack.ss_sp = f.stack_lo;
    f.uc.uc_stack.ss_size = f.stack_size - f.stagger;
    f.uc.uc_link = nullptr;
    makecontext(&f.uc, entry, 0);
#endif
}

static void landed(Fiber &self, void *fake)
{
    const void *bottom = nullptr;
    size_t size = 0;
    WEMU_ASAN_FINISH_SWITCH(fake, &bottom, &size);
    if (switching_from && !switching_from->map) {
        switching_from->asan_bottom = bottom;
        switching_from->asan_size = size;
    }
    (void)self;
}

WEMU_HOT void fiber_switch(Fiber &from, Fiber &to, bool exiting)
{
    const void *bottom = to.map ? (const void *)to.stack_lo : to.asan_bottom;
    size_t size = to.map ? to.stack_size : to.asan_size;
    WEMU_ASAN_START_SWITCH(exiting ? nullptr : &from.asan_fake, bottom, size);
    (void)bottom, (void)size, (void)exiting;
    switching_from = &from;
#if defined(__x86_64__)
    wemu_fiber_switch(&from.sp, to.sp);
#else
    swapcontext(&from.uc, &to.uc);
#endif
    landed(from, from.asan_fake);
}

void fiber_started(Fiber &self)
{
    landed(self, nullptr);
}

} // namespace wemu
