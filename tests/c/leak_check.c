/*
 * A host that forgets to free one handle, for scripts/c-tests.sh to run under
 * valgrind --leak-check=full: valgrind must report that handle as "definitely lost"
 * (allocated by the function named below), not hide it as "still reachable" behind
 * the library's registry of live handles, so a host can find its own leaks.
 *
 *   leak_check engine    creates an engine and an outcome, frees only the outcome
 *   leak_check outcome   creates an engine and an outcome, frees only the engine
 *
 * Exits 0 when every call before the deliberate leak succeeded, 2 on bad usage.
 */
#include "strategy_webhook.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define TOKEN "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

static const char *SNAPSHOT =
    "{\"id\":\"s1\",\"token_hash\":\"" TOKEN "\",\"status\":\"active\",\"asset_class\":\"equity\","
    "\"allowed_instruments\":[\"AAPL\"],\"bots\":[]}";
static const char *BODY = "{\"ticker\":\"AAPL\",\"action\":\"buy\"}";

/*
 * Kept out of main so that no live stack slot or register still holds the lost
 * handle's address when valgrind looks for leaks at exit.
 */
__attribute__((noinline)) static int run(int leak_engine) {
    swh_engine *engine = NULL;
    swh_outcome *outcome = NULL;
    uint16_t status = 0;
    if (swh_engine_new(&engine) != SWH_OK) return 1;
    if (swh_engine_upsert(engine, (const uint8_t *)SNAPSHOT, strlen(SNAPSHOT)) != SWH_OK) return 1;
    if (swh_engine_deliver(engine, (const uint8_t *)TOKEN, strlen(TOKEN), (const uint8_t *)BODY, strlen(BODY),
                           "application/json", 16, INT64_C(1705676400000), &outcome) != SWH_OK)
        return 1;
    if (swh_outcome_http_status(outcome, &status) != SWH_OK || status == 0) return 1;
    if (leak_engine) {
        if (swh_outcome_free(outcome) != SWH_OK) return 1;
    } else {
        if (swh_engine_free(engine) != SWH_OK) return 1;
    }
    /* The one that is left is forgotten on purpose. */
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "engine") != 0 && strcmp(argv[1], "outcome") != 0)) {
        fprintf(stderr, "usage: %s engine|outcome\n", argv[0]);
        return 2;
    }
    int failed = run(strcmp(argv[1], "engine") == 0);
    printf("leak_check %s: %s\n", argv[1], failed ? "a call failed" : "one handle left unfreed on purpose");
    return failed;
}
