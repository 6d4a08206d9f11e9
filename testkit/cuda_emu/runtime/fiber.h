/* testkit/cuda_emu/runtime/fiber.h: cooperative fibers for the device threads of a block.
 *
 * A fiber is a stack of its own (mmap'd, a guard page below it) and a saved stack pointer;
 * the executor's own stack is a fiber too, entered first and returned to when no device
 * thread can run. A switch goes from one fiber straight to another. On x86-64 it saves the
 * callee-saved registers and nothing else (no signal mask, no system call); elsewhere it
 * is ucontext's swapcontext. Under AddressSanitizer
 * every switch is announced (__sanitizer_start_switch_fiber, __sanitizer_finish_switch_fiber),
 * so that ASan knows which stack is current and keeps fake stacks apart. */
#ifndef WEFT_CUDA_EMU_FIBER_H
#define WEFT_CUDA_EMU_FIBER_H

#include <cstddef>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace wemu {

struct Fiber {
    char *map = nullptr;      /* the mapping: guard page, then the stack */
    size_t map_size = 0;
    char *stack_lo = nullptr; /* the usable stack: [stack_lo, stack_lo + stack_size) */
    size_t stack_size = 0;
    size_t stagger = 0;       /* bytes left unused above the first frame */
    void *sp = nullptr;       /* saved stack pointer while not running */
    void *asan_fake = nullptr;
    const void *asan_bottom = nullptr; /* the executor's stack, as ASan reports it */
    size_t asan_size = 0;
    bool dirty = false;       /* left mid-kernel: its whole stack is cleaned before reuse */
#if !defined(__x86_64__)
    ucontext_t uc;
#endif
};

/* Maps the stack (size bytes plus a guard page); false when the mapping fails. `slot`
 * staggers the stack's top so that the fibers' hot frames do not all fall into the same
 * cache sets. */
bool fiber_alloc(Fiber &f, size_t size, unsigned slot);
void fiber_free(Fiber &f);
/* Makes f start at entry() when next switched to; entry never returns (it ends by
 * switching away with exiting set). */
void fiber_reset(Fiber &f, void (*entry)());
/* Suspends `from` (the running fiber) and runs `to`; returns when something switches
 * back to `from`. exiting: `from` is not resumed until it is reset. */
void fiber_switch(Fiber &from, Fiber &to, bool exiting);
/* First thing in entry(): completes the switch that started the fiber. */
void fiber_started(Fiber &self);

} // namespace wemu

#endif
