/* testkit/cuda_emu/runtime/sanitizers.h: AddressSanitizer's fiber and poisoning calls
 * when the emulator is built with it, nothing otherwise. */
#ifndef WEFT_CUDA_EMU_SANITIZERS_H
#define WEFT_CUDA_EMU_SANITIZERS_H

#if defined(__SANITIZE_ADDRESS__)
#define WEMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEMU_ASAN 1
#endif
#endif

#ifdef WEMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define WEMU_ASAN_START_SWITCH(save, bottom, size) __sanitizer_start_switch_fiber(save, bottom, size)
#define WEMU_ASAN_FINISH_SWITCH(save, bottom, size) __sanitizer_finish_switch_fiber(save, bottom, size)
#define WEMU_ASAN_POISON(p, n) __asan_poison_memory_region((p), (n))
#define WEMU_ASAN_UNPOISON(p, n) __asan_unpoison_memory_region((p), (n))
#else
#define WEMU_ASAN_START_SWITCH(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define WEMU_ASAN_FINISH_SWITCH(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define WEMU_ASAN_POISON(p, n) ((void)(p), (void)(n))
#define WEMU_ASAN_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* The scheduler's hot paths (picking the next thread, waking one, a warp exchange, the
 * switch): uninstrumented in the sanitizer build, where their checks of the emulator's
 * own fixed arrays cost more than the kernels being run (over half of a suite's time
 * under perf); the kernels, the memory model and the rest of the emulator stay
 * instrumented. */
#define WEMU_HOT __attribute__((no_sanitize("address", "undefined")))

#endif
