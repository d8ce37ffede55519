#include "runtime/components.h"

namespace disc::runtime {

bool has_cpu_codegen() {
#ifdef DISC_HAVE_MLIR
  return true;
#else
  return false;
#endif
}

bool has_onednn() {
#ifdef DISC_HAVE_ONEDNN
  return true;
#else
  return false;
#endif
}

}  // namespace disc::runtime
