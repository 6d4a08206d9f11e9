/* weft/testkit.h: what tests of weft and of its plugins use (libweft-testkit): gradient
 * checks against finite differences, and the conformance suite (weft/conformance.h) that
 * runs every op a backend registers against the cpu. */
#ifndef WEFT_TESTKIT_H
#define WEFT_TESTKIT_H

#include "weft/conformance.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* torch.autograd.gradcheck: compares the analytical gradient of sum(fn(inputs) * w) for
 * a fixed random w with central differences (eps) in float64. Inputs must be float64
 * leaves; those that require grad are checked. Returns 0 when every entry satisfies
 * |analytical - numerical| <= atol + rtol * |numerical|, else WEFT_ERR_RUNTIME naming the
 * input, the entry and both values. */
typedef weft_tensor *(*weft_gradcheck_fn)(void *ctx, weft_tensor *const *inputs);
int weft_gradcheck(weft_gradcheck_fn fn, void *ctx, int ninputs, weft_tensor *const *inputs,
                   double eps, double atol, double rtol);


#ifdef __cplusplus
}
#endif
#endif
