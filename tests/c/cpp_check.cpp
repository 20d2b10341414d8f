// The header compiles as C++ and its functions link with C linkage from C++.
#include "strategy_webhook.h"

#include <cstdio>

int main() {
    const char *version = nullptr;
    size_t len = 0;
    if (swh_version(&version, &len) != SWH_OK) return 1;
    swh_engine *engine = nullptr;
    if (swh_engine_new(&engine) != SWH_OK) return 1;
    swh_result freed = swh_engine_free(engine);
    std::printf("C++: strategy-webhook %.*s\n", static_cast<int>(len), version);
    return freed == SWH_OK ? 0 : 1;
}
