/* train/kinds.c: the kinds of vtable the train library defines, registered when the
 * library loads, so a plugin that links it (weft-io.so, weft-optim.so) can register its
 * readers, optimizers and communicators from its init(). A failure here (out of memory)
 * leaves the error pending on the loading thread. */
#include "internal.h"
#include "weft/dataset.h"
#include "weft/dist.h"
#include "weft/optim.h"

const char weft_kind_reader[] = "reader";
const char weft_kind_optimizer[] = "optimizer";

__attribute__((constructor)) static void register_train_kinds(void)
{
    const void *const kinds[] = {&weft_reader_kind, &weft_optimizer_kind,
                                 &weft_communicator_kind};
    weft_register_all(3, kinds);
}
