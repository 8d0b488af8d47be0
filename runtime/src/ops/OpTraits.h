// Facts about ops that callers of Ops.h need besides shapes and values: the compiler's
// evaluator uses them to decide what it can compute when only shapes are known.
#ifndef DSRT_OPS_OPTRAITS_H
#define DSRT_OPS_OPTRAITS_H

#include <string_view>

namespace dsrt::ops {

// False for ops whose outputs depend only on their inputs' shapes (Shape, Size):
// compute() accepts inputs with null data for them.
bool readsInputValues(std::string_view op);

} // namespace dsrt::ops

#endif
