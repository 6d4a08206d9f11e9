"""What the bench/ Python scripts share: weft-bench's way of timing (median of `repeats`
runs after one warm-up run), so that both sides of a comparison are timed alike."""
import time


def time_median(fn, repeats):
    fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    samples.sort()
    return samples[len(samples) // 2]
