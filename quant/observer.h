/* quant/observer.h: HistogramObserver's histogram (histogram.c), for observer.c. */
#ifndef WEFT_QUANT_OBSERVER_H
#define WEFT_QUANT_OBSERVER_H

#include "internal.h"

struct quant_histogram;

QUANT_INTERNAL struct quant_histogram *quant_histogram_new(int bins, int upsample_rate);
QUANT_INTERNAL void quant_histogram_free(struct quant_histogram *h);
/* Adds n values (NaN skipped), widening the range as torch's forward() does. */
QUANT_INTERNAL int quant_histogram_update(struct quant_histogram *h, const float *x, int64_t n);
/* torch's _non_linear_param_search for a dtype of 256 levels: the range whose uniform
 * quantization has the least L2 error over the histogram. */
QUANT_INTERNAL int quant_histogram_range(const struct quant_histogram *h, enum weft_dtype dtype,
                                         double *min, double *max);

#endif
