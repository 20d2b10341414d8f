/*
 * A small C host of strategy-webhook: loads a strategy snapshot, then feeds the
 * engine a few webhook deliveries and prints each HTTP status and response body.
 *
 *   host [SNAPSHOT.json]      (default: examples/strategies/demo.json)
 *
 * Build and run: scripts/c-tests.sh (or see "Use from C" in the README).
 */
#include "strategy_webhook.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The token of examples/strategies/demo.json. */
static const char DEMO_TOKEN[] = "d4080c65a7ec92cae69c9e5e26b0bdc2bf10f18df4eee5217ef0d1eb5ec3874c";
static const char OTHER_TOKEN[] = "0000000000000000000000000000000000000000000000000000000000000000";

/* Prints the last error on this thread after a failed call. */
static int fail(const char *what, swh_result r) {
    const char *msg = NULL;
    size_t len = 0;
    swh_last_error_message(&msg, &len);
    fprintf(stderr, "%s failed (code %d): %.*s\n", what, (int)r, (int)len, msg);
    return 1;
}

/* Reads a whole file; the caller frees *out. */
static int read_file(const char *path, uint8_t **out, size_t *out_len) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            uint8_t *bigger = realloc(buf, cap *= 2);
            if (!bigger) { free(buf); buf = NULL; }
            buf = bigger;
        }
    }
    fclose(f);
    if (!buf) return -1;
    *out = buf;
    *out_len = len;
    return 0;
}

struct delivery {
    const char *label;
    const char *token;
    const char *content_type; /* NULL: no Content-Type header */
    const char *body;
};

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "examples/strategies/demo.json";
    const char *version = NULL;
    size_t version_len = 0;
    swh_result r = swh_version(&version, &version_len);
    if (r != SWH_OK) return fail("swh_version", r);
    printf("strategy-webhook %s\n", version);

    uint8_t *snapshot = NULL;
    size_t snapshot_len = 0;
    if (read_file(path, &snapshot, &snapshot_len) != 0) {
        fprintf(stderr, "cannot read %s\n", path);
        return 1;
    }

    swh_engine *engine = NULL;
    if ((r = swh_engine_new(&engine)) != SWH_OK) {
        free(snapshot);
        return fail("swh_engine_new", r);
    }
    r = swh_engine_upsert(engine, snapshot, snapshot_len);
    free(snapshot);
    if (r != SWH_OK) {
        fail("swh_engine_upsert", r);
        swh_engine_free(engine);
        return 1;
    }
    printf("loaded %s\n\n", path);

    const struct delivery deliveries[] = {
        {"JSON alert", DEMO_TOKEN, "application/json",
         "{\"ticker\":\"NASDAQ:AAPL\",\"action\":\"buy\",\"price\":\"190.12\"}"},
        {"text alert", DEMO_TOKEN, "text/plain", "buy long AAPL"},
        {"instrument not allowed", DEMO_TOKEN, "application/json", "{\"ticker\":\"TSLA\",\"action\":\"buy\"}"},
        {"the same again (duplicate)", DEMO_TOKEN, "application/json", "{\"ticker\":\"TSLA\",\"action\":\"buy\"}"},
        {"no content type", DEMO_TOKEN, NULL, "{\"ticker\":\"MSFT\",\"action\":\"CLOSE\",\"direction\":\"LONG\"}"},
        {"malformed token", "not-a-token", "application/json", "{\"ticker\":\"AAPL\",\"action\":\"buy\"}"},
        {"unknown token", OTHER_TOKEN, "application/json", "{\"ticker\":\"AAPL\",\"action\":\"buy\"}"},
    };
    int64_t now_ms = (int64_t)time(NULL) * 1000;
    int status_code = 0;
    for (size_t i = 0; i < sizeof deliveries / sizeof deliveries[0]; i++) {
        const struct delivery *d = &deliveries[i];
        swh_outcome *outcome = NULL;
        r = swh_engine_deliver(engine, (const uint8_t *)d->token, strlen(d->token), (const uint8_t *)d->body,
                               strlen(d->body), d->content_type, d->content_type ? strlen(d->content_type) : 0,
                               now_ms + (int64_t)i, &outcome);
        if (r != SWH_OK) {
            status_code = fail("swh_engine_deliver", r);
            break;
        }
        uint16_t status = 0;
        const char *body = NULL;
        size_t body_len = 0;
        if ((r = swh_outcome_http_status(outcome, &status)) != SWH_OK ||
            (r = swh_outcome_response(outcome, &body, &body_len)) != SWH_OK) {
            status_code = fail("swh_outcome accessor", r);
            swh_outcome_free(outcome);
            break;
        }
        printf("%-28s %s\n  -> %u %.*s\n", d->label, d->body, (unsigned)status, (int)body_len, body);
        swh_outcome_free(outcome);
    }

    swh_engine_free(engine);
    return status_code;
}
