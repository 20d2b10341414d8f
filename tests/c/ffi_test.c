/*
 * Tests of the C ABI from C: every exported function, its success path and its error
 * paths (NULL arguments, length mismatches, invalid UTF-8, malformed snapshots,
 * invalid tokens, use after free, double free, free(NULL)), the ABI version and the
 * limits against the library's behaviour, and one engine shared by several threads.
 * Ends with "N passed, M failed" and exits non-zero on failure.
 *
 * Run by scripts/c-tests.sh, also under valgrind.
 */
#include "strategy_webhook.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (cond) {                                                          \
            passed++;                                                        \
        } else {                                                             \
            failed++;                                                        \
            fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                    \
    } while (0)

/* Checks a status code and, on failure, that the last error message is not empty. */
#define CHECK_RESULT(call, expected)                                                          \
    do {                                                                                      \
        swh_result r_ = (call);                                                               \
        if (r_ == (expected)) {                                                               \
            passed++;                                                                         \
        } else {                                                                              \
            failed++;                                                                         \
            fprintf(stderr, "%s:%d: FAILED: %s returned %d, expected %d (%s)\n", __FILE__, __LINE__, \
                    #call, (int)r_, (int)(expected), last_error());                           \
        }                                                                                     \
        if ((expected) != SWH_OK) CHECK(last_error()[0] != '\0');                             \
    } while (0)

#define TOKEN "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define TOKEN2 "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define TOKEN3 "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
#define JSON "application/json"
/* 2024-01-19 15:00 UTC */
#define T0 INT64_C(1705676400000)

#define SNAPSHOT(id, token, status)                                                                     \
    "{\"id\":\"" id "\",\"token_hash\":\"" token "\",\"status\":\"" status "\",\"asset_class\":\"equity\"," \
    "\"allowed_instruments\":[\"AAPL\"],\"directions\":{\"long\":true,\"short\":false},"                 \
    "\"rules\":{\"buy\":\"open_long\",\"sell\":\"close_long\"},"                                        \
    "\"bots\":[{\"id\":\"b1\",\"broker\":\"alpaca\",\"account_id\":\"PA0\",\"sizing\":{\"fixed_quantity\":\"1\"}}]}"

static const char *S1 = SNAPSHOT("s1", TOKEN, "active");
static const char *S2 = SNAPSHOT("s2", TOKEN2, "active");
static const char *S2_PAUSED = SNAPSHOT("s2", TOKEN2, "paused");
static const char *S3_SAME_TOKEN = SNAPSHOT("s3", TOKEN, "active");

/* An alert every test strategy rejects without reaching order formatting. */
static const char *REJECTED = "{\"ticker\":\"TSLA\",\"action\":\"buy\"}";

/* The calling thread's last error message (borrowed until the next swh_ call). */
static const char *last_error(void) {
    const char *msg = NULL;
    size_t len = 0;
    if (swh_last_error_message(&msg, &len) != SWH_OK || msg == NULL) return "<swh_last_error_message failed>";
    return msg;
}

static const uint8_t *u8(const char *s) { return (const uint8_t *)s; }

static swh_result upsert(const swh_engine *e, const char *snapshot) {
    return swh_engine_upsert(e, u8(snapshot), strlen(snapshot));
}

static swh_result deliver(const swh_engine *e, const char *token, const char *body, int64_t now, swh_outcome **out) {
    return swh_engine_deliver(e, u8(token), strlen(token), u8(body), strlen(body), JSON, strlen(JSON), now, out);
}

/* Status and body of an outcome; checks the accessors agree with the Outcome JSON. */
static uint16_t status_of(const swh_outcome *o, char *body, size_t cap) {
    uint16_t status = 0;
    const char *resp = NULL, *json = NULL;
    size_t resp_len = 0, json_len = 0;
    CHECK_RESULT(swh_outcome_http_status(o, &status), SWH_OK);
    CHECK_RESULT(swh_outcome_response(o, &resp, &resp_len), SWH_OK);
    CHECK_RESULT(swh_outcome_json(o, &json, &json_len), SWH_OK);
    if (!resp || !json) return 0;
    CHECK(strlen(resp) == resp_len); /* NUL-terminated, NUL not counted */
    CHECK(strlen(json) == json_len);
    char expect[64];
    snprintf(expect, sizeof expect, "{\"http_status\":%u,\"response\":", (unsigned)status);
    CHECK(strncmp(json, expect, strlen(expect)) == 0);
    CHECK(strncmp(json + strlen(expect), resp, resp_len) == 0); /* response embedded verbatim */
    snprintf(body, cap, "%.*s", (int)resp_len, resp);
    return status;
}

/* Delivers and returns the status, copying the body; frees the outcome. */
static uint16_t post(const swh_engine *e, const char *token, const char *body_in, int64_t now, char *body, size_t cap) {
    swh_outcome *o = NULL;
    CHECK_RESULT(deliver(e, token, body_in, now, &o), SWH_OK);
    uint16_t status = o ? status_of(o, body, cap) : 0;
    CHECK_RESULT(swh_outcome_free(o), SWH_OK);
    return status;
}

static void test_version_and_last_error(void) {
    const char *v = NULL;
    size_t n = 0;
    CHECK_RESULT(swh_version(&v, &n), SWH_OK);
    CHECK(v != NULL && n > 0 && strlen(v) == n && strchr(v, '.') != NULL);
    CHECK_RESULT(swh_version(NULL, &n), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_version(&v, NULL), SWH_NULL_ARGUMENT);
    CHECK(strstr(last_error(), "out_len") != NULL);

    /* A success clears the message; reading it twice keeps it. */
    CHECK_RESULT(swh_version(&v, &n), SWH_OK);
    const char *msg = NULL;
    size_t len = 99;
    CHECK_RESULT(swh_last_error_message(&msg, &len), SWH_OK);
    CHECK(msg != NULL && len == 0 && msg[0] == '\0');
    CHECK_RESULT(swh_engine_new(NULL), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_last_error_message(&msg, &len), SWH_OK);
    CHECK(len > 0 && strlen(msg) == len && strstr(msg, "out_engine") != NULL);
    CHECK_RESULT(swh_last_error_message(&msg, &len), SWH_OK);
    CHECK(len > 0);
    CHECK_RESULT(swh_last_error_message(NULL, &len), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_last_error_message(&msg, NULL), SWH_NULL_ARGUMENT);
    /* Those leave the text handed out before as it was (valgrind sees a read of freed text). */
    CHECK(strlen(msg) == len && strstr(msg, "out_engine") != NULL);
}

static void test_engine_upsert_remove_rotate(void) {
    swh_engine *e = NULL;
    CHECK_RESULT(swh_engine_new(&e), SWH_OK);
    CHECK(e != NULL);
    char body[512];

    /* upsert */
    CHECK_RESULT(upsert(e, S1), SWH_OK);
    CHECK_RESULT(upsert(e, S1), SWH_OK); /* replacing the same id */
    CHECK_RESULT(upsert(e, S2), SWH_OK);
    CHECK_RESULT(upsert(e, "{not json"), SWH_INVALID_SNAPSHOT);
    CHECK(strstr(last_error(), "invalid strategy snapshot") != NULL);
    CHECK_RESULT(upsert(e, "{\"id\":\"x\"}"), SWH_INVALID_SNAPSHOT);
    CHECK_RESULT(upsert(e, S3_SAME_TOKEN), SWH_TOKEN_IN_USE);
    CHECK(strstr(last_error(), "s1") != NULL);
    CHECK_RESULT(swh_engine_upsert(e, NULL, 0), SWH_INVALID_SNAPSHOT); /* the empty buffer */
    CHECK_RESULT(swh_engine_upsert(e, NULL, 10), SWH_INVALID_ARGUMENT);
    CHECK_RESULT(swh_engine_upsert(e, u8(S1), SIZE_MAX), SWH_INVALID_ARGUMENT);
    CHECK_RESULT(swh_engine_upsert(NULL, u8(S1), strlen(S1)), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_engine_upsert(e, u8("\xff\xfe"), 2), SWH_INVALID_SNAPSHOT);

    /* rotate */
    CHECK_RESULT(swh_engine_rotate(e, "s1", 2, u8("short"), 5), SWH_INVALID_TOKEN);
    CHECK_RESULT(swh_engine_rotate(e, "s1", 2, u8(TOKEN2), 64), SWH_TOKEN_IN_USE);
    CHECK_RESULT(swh_engine_rotate(e, "nope", 4, u8(TOKEN3), 64), SWH_UNKNOWN_STRATEGY);
    CHECK_RESULT(swh_engine_rotate(e, "\xff", 1, u8(TOKEN3), 64), SWH_INVALID_UTF8);
    CHECK_RESULT(swh_engine_rotate(e, NULL, 2, u8(TOKEN3), 64), SWH_INVALID_ARGUMENT);
    CHECK_RESULT(swh_engine_rotate(e, "s1", 2, NULL, 64), SWH_INVALID_ARGUMENT);
    CHECK_RESULT(swh_engine_rotate(NULL, "s1", 2, u8(TOKEN3), 64), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_engine_rotate(e, "s1", 2, u8(TOKEN3), 64), SWH_OK);
    CHECK(post(e, TOKEN, REJECTED, T0, body, sizeof body) == 404);
    CHECK(post(e, TOKEN3, REJECTED, T0, body, sizeof body) == 200);
    CHECK(strstr(body, "\"status\":\"rejected\"") != NULL);

    /* remove */
    CHECK_RESULT(swh_engine_remove(e, "nope", 4), SWH_UNKNOWN_STRATEGY);
    CHECK_RESULT(swh_engine_remove(e, "\xc3\x28", 2), SWH_INVALID_UTF8);
    CHECK_RESULT(swh_engine_remove(e, NULL, 3), SWH_INVALID_ARGUMENT);
    CHECK_RESULT(swh_engine_remove(e, NULL, 0), SWH_UNKNOWN_STRATEGY); /* the empty id */
    CHECK_RESULT(swh_engine_remove(NULL, "s1", 2), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_engine_remove(e, "s1", 2), SWH_OK);
    CHECK_RESULT(swh_engine_remove(e, "s1", 2), SWH_UNKNOWN_STRATEGY);
    CHECK(post(e, TOKEN3, REJECTED, T0, body, sizeof body) == 404);

    CHECK_RESULT(swh_engine_free(e), SWH_OK);
}

static void test_deliver(void) {
    swh_engine *e = NULL;
    CHECK_RESULT(swh_engine_new(&e), SWH_OK);
    CHECK_RESULT(upsert(e, S1), SWH_OK);
    CHECK_RESULT(upsert(e, S2_PAUSED), SWH_OK);
    char body[512];

    /* Statuses that do not depend on broker formatting. */
    CHECK(post(e, "not-a-token", REJECTED, T0, body, sizeof body) == 400);
    CHECK(strstr(body, "invalid_token") != NULL);
    CHECK(post(e, TOKEN3, REJECTED, T0, body, sizeof body) == 404);
    CHECK(strstr(body, "unknown_token") != NULL);
    CHECK(post(e, TOKEN2, REJECTED, T0, body, sizeof body) == 200);
    CHECK(strcmp(body, "{\"rejected\":true,\"reason\":\"strategy is paused\"}") == 0);
    CHECK(post(e, TOKEN, REJECTED, T0, body, sizeof body) == 200);
    CHECK(strncmp(body, "{\"status\":\"rejected\",\"reason\":", 30) == 0);
    CHECK(post(e, TOKEN, REJECTED, T0 + 1000, body, sizeof body) == 200);
    CHECK(strcmp(body, "{\"status\":\"duplicate\"}") == 0);

    size_t big_len = 262144 + 1;
    uint8_t *big = malloc(big_len);
    CHECK(big != NULL);
    if (big) {
        memset(big, ' ', big_len);
        swh_outcome *o = NULL;
        CHECK_RESULT(swh_engine_deliver(e, u8(TOKEN), 64, big, big_len, NULL, 0, T0, &o), SWH_OK);
        CHECK(o && status_of(o, body, sizeof body) == 413);
        CHECK_RESULT(swh_outcome_free(o), SWH_OK);
        free(big);
    }

    /* The rate limit: the 61st POST within a minute is a 429 (two counted above; a 413 is not counted). */
    int last = 0;
    for (int i = 0; i < 58; i++) last = post(e, TOKEN, REJECTED, T0 + 2000 + i, body, sizeof body);
    CHECK(last == 200);
    CHECK(post(e, TOKEN, REJECTED, T0 + 3000, body, sizeof body) == 429);
    CHECK(strcmp(body, "{\"error\":\"rate limit exceeded\"}") == 0);

    /* Argument errors leave the out-parameter alone. */
    swh_outcome *sentinel = (swh_outcome *)&last;
    swh_outcome *o = sentinel;
    CHECK_RESULT(swh_engine_deliver(e, u8(TOKEN), 64, u8("{}"), 2, "\xff", 1, T0, &o), SWH_INVALID_UTF8);
    CHECK(o == sentinel);
    CHECK_RESULT(swh_engine_deliver(e, u8(TOKEN), 64, NULL, 5, JSON, strlen(JSON), T0, &o), SWH_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "body") != NULL);
    CHECK(o == sentinel);
    CHECK_RESULT(swh_engine_deliver(e, NULL, 64, u8("{}"), 2, JSON, strlen(JSON), T0, &o), SWH_INVALID_ARGUMENT);
    CHECK_RESULT(swh_engine_deliver(e, u8(TOKEN), 64, u8("{}"), 2, NULL, 7, T0, &o), SWH_INVALID_ARGUMENT);
    CHECK_RESULT(swh_engine_deliver(NULL, u8(TOKEN), 64, u8("{}"), 2, NULL, 0, T0, &o), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_engine_deliver(e, u8(TOKEN), 64, u8("{}"), 2, NULL, 0, T0, NULL), SWH_NULL_ARGUMENT);
    CHECK(o == sentinel);

    /* NULL/0 buffers are empty: an empty token is a 400, not an argument error. */
    o = NULL;
    CHECK_RESULT(swh_engine_deliver(e, NULL, 0, NULL, 0, NULL, 0, T0, &o), SWH_OK);
    CHECK(o && status_of(o, body, sizeof body) == 400);
    CHECK_RESULT(swh_outcome_free(o), SWH_OK);

    CHECK_RESULT(swh_engine_free(e), SWH_OK);
}

static void test_dry_run(void) {
    swh_engine *e = NULL;
    CHECK_RESULT(swh_engine_new(&e), SWH_OK);
    CHECK_RESULT(upsert(e, S1), SWH_OK);
    char body[512];
    swh_outcome *o = NULL;
    size_t len = strlen(REJECTED);

    /* A dry run records nothing: the delivery after it is not a duplicate. */
    CHECK_RESULT(swh_engine_dry_run(e, u8(TOKEN), 64, u8(REJECTED), len, JSON, strlen(JSON), T0, &o), SWH_OK);
    CHECK(o && status_of(o, body, sizeof body) == 200 && strstr(body, "\"rejected\"") != NULL);
    CHECK_RESULT(swh_outcome_free(o), SWH_OK);
    CHECK(post(e, TOKEN, REJECTED, T0, body, sizeof body) == 200);
    CHECK(strstr(body, "\"status\":\"rejected\"") != NULL);
    o = NULL;
    CHECK_RESULT(swh_engine_dry_run(e, u8(TOKEN), 64, u8(REJECTED), len, JSON, strlen(JSON), T0, &o), SWH_OK);
    CHECK(o && status_of(o, body, sizeof body) == 200 && strcmp(body, "{\"status\":\"duplicate\"}") == 0);
    CHECK_RESULT(swh_outcome_free(o), SWH_OK);

    o = NULL;
    CHECK_RESULT(swh_engine_dry_run(e, u8("x"), 1, u8(REJECTED), len, NULL, 0, T0, &o), SWH_OK);
    CHECK(o && status_of(o, body, sizeof body) == 400);
    CHECK_RESULT(swh_outcome_free(o), SWH_OK);

    o = NULL;
    CHECK_RESULT(swh_engine_dry_run(NULL, u8(TOKEN), 64, u8(REJECTED), len, NULL, 0, T0, &o), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_engine_dry_run(e, u8(TOKEN), 64, u8(REJECTED), len, NULL, 0, T0, NULL), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_engine_dry_run(e, u8(TOKEN), 64, NULL, 1, NULL, 0, T0, &o), SWH_INVALID_ARGUMENT);
    CHECK_RESULT(swh_engine_dry_run(e, u8(TOKEN), 64, u8(REJECTED), len, "\x80", 1, T0, &o), SWH_INVALID_UTF8);
    CHECK(o == NULL);
    CHECK_RESULT(swh_engine_free(e), SWH_OK);
}

static void test_validate(void) {
    char body[512];
    swh_outcome *o = NULL;
    size_t len = strlen(REJECTED);
    CHECK_RESULT(swh_validate(u8(S1), strlen(S1), u8(REJECTED), len, JSON, strlen(JSON), T0, &o), SWH_OK);
    CHECK(o && status_of(o, body, sizeof body) == 200 && strstr(body, "\"status\":\"rejected\"") != NULL);
    CHECK_RESULT(swh_outcome_free(o), SWH_OK);
    /* Nothing was recorded: the same body validates the same way again. */
    o = NULL;
    CHECK_RESULT(swh_validate(u8(S1), strlen(S1), u8(REJECTED), len, NULL, 0, T0, &o), SWH_OK);
    CHECK(o && status_of(o, body, sizeof body) == 200 && strstr(body, "\"status\":\"rejected\"") != NULL);
    CHECK_RESULT(swh_outcome_free(o), SWH_OK);
    o = NULL;
    CHECK_RESULT(swh_validate(u8(S2_PAUSED), strlen(S2_PAUSED), u8(REJECTED), len, NULL, 0, T0, &o), SWH_OK);
    CHECK(o && status_of(o, body, sizeof body) == 200 && strstr(body, "paused") != NULL);
    CHECK_RESULT(swh_outcome_free(o), SWH_OK);

    o = NULL;
    CHECK_RESULT(swh_validate(u8("{}"), 2, u8(REJECTED), len, NULL, 0, T0, &o), SWH_INVALID_SNAPSHOT);
    CHECK(strstr(last_error(), "invalid strategy snapshot") != NULL);
    CHECK_RESULT(swh_validate(NULL, 0, u8(REJECTED), len, NULL, 0, T0, &o), SWH_INVALID_SNAPSHOT);
    CHECK_RESULT(swh_validate(NULL, 4, u8(REJECTED), len, NULL, 0, T0, &o), SWH_INVALID_ARGUMENT);
    CHECK_RESULT(swh_validate(u8(S1), strlen(S1), NULL, 4, NULL, 0, T0, &o), SWH_INVALID_ARGUMENT);
    CHECK_RESULT(swh_validate(u8(S1), strlen(S1), u8(REJECTED), len, "\xfe", 1, T0, &o), SWH_INVALID_UTF8);
    CHECK_RESULT(swh_validate(u8(S1), strlen(S1), u8(REJECTED), len, NULL, 0, T0, NULL), SWH_NULL_ARGUMENT);
    CHECK(o == NULL);
}

static void test_parse(void) {
    swh_parsed *p = NULL;
    bool ok = false;
    const char *text = NULL;
    size_t len = 0;
    const char *alert = "{\"ticker\":\"NASDAQ:AAPL\",\"action\":\"buy\",\"price\":\"190.50\"}";

    CHECK_RESULT(swh_parse(u8(alert), strlen(alert), JSON, strlen(JSON), &p), SWH_OK);
    CHECK_RESULT(swh_parsed_ok(p, &ok), SWH_OK);
    CHECK(ok);
    CHECK_RESULT(swh_parsed_alerts_json(p, &text, &len), SWH_OK);
    CHECK(text && strlen(text) == len && text[0] == '[' && strstr(text, "\"instrument\":\"AAPL\"") != NULL);
    CHECK(text && strstr(text, "\"price\":190.50") != NULL);
    CHECK_RESULT(swh_parsed_reason(p, &text, &len), SWH_OK);
    CHECK(text && len == 0 && text[0] == '\0');
    CHECK_RESULT(swh_parsed_free(p), SWH_OK);

    p = NULL;
    CHECK_RESULT(swh_parse(u8("{\"action\":\"buy\"}"), 16, NULL, 0, &p), SWH_OK);
    ok = true;
    CHECK_RESULT(swh_parsed_ok(p, &ok), SWH_OK);
    CHECK(!ok);
    CHECK_RESULT(swh_parsed_reason(p, &text, &len), SWH_OK);
    CHECK(text && len > 0 && strlen(text) == len && strstr(text, "instrument") != NULL);
    CHECK_RESULT(swh_parsed_alerts_json(p, &text, &len), SWH_OK);
    CHECK(text && len == 2 && strcmp(text, "[]") == 0);

    /* Accessor argument errors. */
    CHECK_RESULT(swh_parsed_ok(NULL, &ok), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_parsed_ok(p, NULL), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_parsed_alerts_json(NULL, &text, &len), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_parsed_alerts_json(p, NULL, &len), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_parsed_alerts_json(p, &text, NULL), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_parsed_reason(NULL, &text, &len), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_parsed_reason(p, NULL, &len), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_parsed_reason(p, &text, NULL), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_parsed_free(p), SWH_OK);

    /* An empty body is a result that says so, not an argument error. */
    p = NULL;
    CHECK_RESULT(swh_parse(NULL, 0, NULL, 0, &p), SWH_OK);
    CHECK_RESULT(swh_parsed_reason(p, &text, &len), SWH_OK);
    CHECK(text && strstr(text, "empty") != NULL);
    CHECK_RESULT(swh_parsed_free(p), SWH_OK);

    swh_parsed *sentinel = (swh_parsed *)&ok;
    p = sentinel;
    CHECK_RESULT(swh_parse(NULL, 3, NULL, 0, &p), SWH_INVALID_ARGUMENT);
    CHECK_RESULT(swh_parse(u8(alert), strlen(alert), NULL, 3, &p), SWH_INVALID_ARGUMENT);
    CHECK_RESULT(swh_parse(u8(alert), strlen(alert), "text/\xff", 6, &p), SWH_INVALID_UTF8);
    CHECK(strstr(last_error(), "content_type") != NULL);
    CHECK_RESULT(swh_parse(u8(alert), strlen(alert), JSON, strlen(JSON), NULL), SWH_NULL_ARGUMENT);
    CHECK(p == sentinel);
}

/* The header's ABI version and limits are the library's. */
static void test_abi_version_and_limits(void) {
    CHECK(swh_abi_version() == SWH_ABI_VERSION);

    /* A body of SWH_MAX_BODY bytes is read; one byte more is answered 413 unread. */
    swh_engine *e = NULL;
    CHECK_RESULT(swh_engine_new(&e), SWH_OK);
    CHECK_RESULT(upsert(e, S1), SWH_OK);
    uint8_t *big = malloc(SWH_MAX_BODY + 1);
    CHECK(big != NULL);
    if (big != NULL) {
        memset(big, 'x', SWH_MAX_BODY + 1);
        const size_t lens[2] = {SWH_MAX_BODY, SWH_MAX_BODY + 1};
        uint16_t statuses[2] = {0, 0};
        for (int i = 0; i < 2; i++) {
            swh_outcome *o = NULL;
            CHECK_RESULT(swh_engine_dry_run(e, u8(TOKEN), 64, big, lens[i], "text/plain", 10, T0, &o), SWH_OK);
            CHECK_RESULT(swh_outcome_http_status(o, &statuses[i]), SWH_OK);
            CHECK_RESULT(swh_outcome_free(o), SWH_OK);
        }
        CHECK(statuses[0] != 0 && statuses[0] != 413);
        CHECK(statuses[1] == 413);
        free(big);
    }
    CHECK_RESULT(swh_engine_free(e), SWH_OK);

    /* An alert may have SWH_MAX_LEGS option legs, not one more. */
    static const char LEG[] = "{\"side\":\"call\",\"action\":\"buy_to_open\",\"strike\":100,\"expiration\":\"2024-01-19\"}";
    for (int legs = SWH_MAX_LEGS; legs <= SWH_MAX_LEGS + 1; legs++) {
        char body[1024] = "{\"ticker\":\"SPX\",\"action\":\"OPEN\",\"direction\":\"LONG\",\"legs\":[";
        for (int i = 0; i < legs; i++) {
            if (i > 0) strcat(body, ",");
            strcat(body, LEG);
        }
        strcat(body, "]}");
        swh_parsed *p = NULL;
        bool ok = false;
        const char *reason = NULL;
        size_t len = 0;
        CHECK_RESULT(swh_parse(u8(body), strlen(body), JSON, strlen(JSON), &p), SWH_OK);
        CHECK_RESULT(swh_parsed_ok(p, &ok), SWH_OK);
        CHECK_RESULT(swh_parsed_reason(p, &reason, &len), SWH_OK);
        if (legs == SWH_MAX_LEGS) {
            CHECK(ok && len == 0);
        } else {
            CHECK(!ok && reason != NULL && strstr(reason, "legs") != NULL);
        }
        CHECK_RESULT(swh_parsed_free(p), SWH_OK);
    }
}

/* Outcome accessors' NULL arguments, wrong-type handles, use after free, double free. */
static void test_handles(void) {
    swh_engine *e = NULL;
    CHECK_RESULT(swh_engine_new(&e), SWH_OK);
    CHECK_RESULT(upsert(e, S1), SWH_OK);
    swh_outcome *o = NULL;
    CHECK_RESULT(deliver(e, TOKEN, REJECTED, T0, &o), SWH_OK);
    uint16_t status = 0;
    const char *text = NULL;
    size_t len = 0;

    CHECK_RESULT(swh_outcome_http_status(NULL, &status), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_outcome_http_status(o, NULL), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_outcome_response(NULL, &text, &len), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_outcome_response(o, NULL, &len), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_outcome_response(o, &text, NULL), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_outcome_json(NULL, &text, &len), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_outcome_json(o, NULL, &len), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_outcome_json(o, &text, NULL), SWH_NULL_ARGUMENT);

    /* The JSON is made once: the same buffer on every call. */
    const char *j1 = NULL, *j2 = NULL;
    CHECK_RESULT(swh_outcome_json(o, &j1, &len), SWH_OK);
    CHECK_RESULT(swh_outcome_json(o, &j2, &len), SWH_OK);
    CHECK(j1 != NULL && j1 == j2);
    CHECK(j1 && strstr(j1, "\"decision\":\"rejected\"") != NULL && strstr(j1, "\"strategy\":\"s1\"") != NULL);

    /* A handle of another type, or a pointer that never came from the library. */
    int not_a_handle = 0;
    CHECK_RESULT(swh_outcome_http_status((const swh_outcome *)e, &status), SWH_INVALID_HANDLE);
    CHECK_RESULT(swh_parsed_ok((const swh_parsed *)o, &(bool){false}), SWH_INVALID_HANDLE);
    CHECK_RESULT(swh_engine_upsert((const swh_engine *)o, u8(S1), strlen(S1)), SWH_INVALID_HANDLE);
    CHECK_RESULT(swh_outcome_free((swh_outcome *)e), SWH_INVALID_HANDLE);
    CHECK_RESULT(swh_engine_free((swh_engine *)&not_a_handle), SWH_INVALID_HANDLE);
    CHECK_RESULT(swh_parsed_free((swh_parsed *)&not_a_handle), SWH_INVALID_HANDLE);
    CHECK(strstr(last_error(), "swh_parsed") != NULL);

    /* Use after free and double free of an outcome are reported, not crashes. */
    CHECK_RESULT(swh_outcome_free(o), SWH_OK);
    status = 7;
    CHECK_RESULT(swh_outcome_http_status(o, &status), SWH_INVALID_HANDLE);
    CHECK(status == 7);
    CHECK_RESULT(swh_outcome_response(o, &text, &len), SWH_INVALID_HANDLE);
    CHECK_RESULT(swh_outcome_json(o, &text, &len), SWH_INVALID_HANDLE);
    CHECK_RESULT(swh_outcome_free(o), SWH_INVALID_HANDLE);
    CHECK(strstr(last_error(), "freed") != NULL);

    /* The same for a parse result. */
    swh_parsed *p = NULL;
    CHECK_RESULT(swh_parse(u8(REJECTED), strlen(REJECTED), NULL, 0, &p), SWH_OK);
    CHECK_RESULT(swh_parsed_free(p), SWH_OK);
    CHECK_RESULT(swh_parsed_ok(p, &(bool){false}), SWH_INVALID_HANDLE);
    CHECK_RESULT(swh_parsed_alerts_json(p, &text, &len), SWH_INVALID_HANDLE);
    CHECK_RESULT(swh_parsed_reason(p, &text, &len), SWH_INVALID_HANDLE);
    CHECK_RESULT(swh_parsed_free(p), SWH_INVALID_HANDLE);

    /* And for an engine. */
    CHECK_RESULT(swh_engine_free(e), SWH_OK);
    o = NULL;
    CHECK_RESULT(deliver(e, TOKEN, REJECTED, T0, &o), SWH_INVALID_HANDLE);
    CHECK(o == NULL);
    CHECK_RESULT(upsert(e, S1), SWH_INVALID_HANDLE);
    CHECK_RESULT(swh_engine_remove(e, "s1", 2), SWH_INVALID_HANDLE);
    CHECK_RESULT(swh_engine_rotate(e, "s1", 2, u8(TOKEN3), 64), SWH_INVALID_HANDLE);
    CHECK_RESULT(swh_engine_dry_run(e, u8(TOKEN), 64, u8("{}"), 2, NULL, 0, T0, &o), SWH_INVALID_HANDLE);
    CHECK_RESULT(swh_engine_free(e), SWH_INVALID_HANDLE);

    /* free(NULL) does nothing. */
    CHECK_RESULT(swh_engine_free(NULL), SWH_OK);
    CHECK_RESULT(swh_outcome_free(NULL), SWH_OK);
    CHECK_RESULT(swh_parsed_free(NULL), SWH_OK);
}

static swh_result deliver_into(const swh_engine *e, const char *token, const char *body, int64_t now, swh_outcome **io) {
    return swh_engine_deliver_into(e, u8(token), strlen(token), u8(body), strlen(body), JSON, strlen(JSON), now, io);
}

/* One outcome refilled by one delivery after another; failures deliver nothing. */
static void test_deliver_into(void) {
    swh_engine *e = NULL;
    CHECK_RESULT(swh_engine_new(&e), SWH_OK);
    CHECK_RESULT(upsert(e, S1), SWH_OK);
    char body[512];

    /* NULL in: a new outcome, as swh_engine_deliver makes. */
    swh_outcome *o = NULL;
    CHECK_RESULT(deliver_into(e, TOKEN, REJECTED, T0, &o), SWH_OK);
    CHECK(o != NULL);
    CHECK(o && status_of(o, body, sizeof body) == 200);
    CHECK(strncmp(body, "{\"status\":\"rejected\",\"reason\":", 30) == 0);
    const char *json = NULL;
    size_t json_len = 0;
    CHECK_RESULT(swh_outcome_json(o, &json, &json_len), SWH_OK);
    CHECK(json && strstr(json, "\"decision\":\"rejected\"") != NULL);

    /* The same outcome, refilled: same pointer, the new answer, a new Outcome JSON. */
    swh_outcome *same = o;
    CHECK_RESULT(deliver_into(e, TOKEN, REJECTED, T0 + 1000, &o), SWH_OK);
    CHECK(o == same);
    CHECK(status_of(o, body, sizeof body) == 200);
    CHECK(strcmp(body, "{\"status\":\"duplicate\"}") == 0);
    CHECK_RESULT(swh_outcome_json(o, &json, &json_len), SWH_OK);
    CHECK(json && strstr(json, "\"decision\":\"duplicate\"") != NULL);
    CHECK_RESULT(deliver_into(e, TOKEN3, REJECTED, T0, &o), SWH_OK);
    CHECK(status_of(o, body, sizeof body) == 404);
    CHECK(strstr(body, "unknown_token") != NULL);
    CHECK_RESULT(deliver_into(e, "not-a-token", REJECTED, T0, &o), SWH_OK);
    CHECK(status_of(o, body, sizeof body) == 400);

    /* An outcome from another call can be refilled too. */
    swh_outcome *dry = NULL;
    CHECK_RESULT(swh_engine_dry_run(e, u8(TOKEN), 64, u8(REJECTED), strlen(REJECTED), NULL, 0, T0, &dry), SWH_OK);
    const char *other = "{\"ticker\":\"MSFT\",\"action\":\"buy\"}";
    CHECK_RESULT(deliver_into(e, TOKEN, other, T0 + 2000, &dry), SWH_OK);
    CHECK(dry && status_of(dry, body, sizeof body) == 200);
    CHECK(strstr(body, "\"status\":\"rejected\"") != NULL);
    CHECK_RESULT(swh_outcome_free(dry), SWH_OK);

    /* Failures: nothing is delivered and the outcome keeps what it held. */
    const char *fresh = "{\"ticker\":\"NVDA\",\"action\":\"buy\"}";
    int not_a_handle = 0;
    swh_outcome *bogus = (swh_outcome *)&not_a_handle;
    CHECK_RESULT(deliver_into(e, TOKEN, fresh, T0 + 3000, &bogus), SWH_INVALID_HANDLE);
    CHECK(bogus == (swh_outcome *)&not_a_handle);
    swh_outcome *wrong_type = (swh_outcome *)e;
    CHECK_RESULT(deliver_into(e, TOKEN, fresh, T0 + 3000, &wrong_type), SWH_INVALID_HANDLE);
    CHECK_RESULT(swh_engine_deliver_into(e, u8(TOKEN), 64, NULL, 5, JSON, strlen(JSON), T0, &o), SWH_INVALID_ARGUMENT);
    CHECK_RESULT(swh_engine_deliver_into(e, u8(TOKEN), 64, u8(fresh), strlen(fresh), "\xff", 1, T0, &o), SWH_INVALID_UTF8);
    CHECK_RESULT(swh_engine_deliver_into(NULL, u8(TOKEN), 64, u8(fresh), strlen(fresh), NULL, 0, T0, &o), SWH_NULL_ARGUMENT);
    CHECK_RESULT(swh_engine_deliver_into(e, u8(TOKEN), 64, u8(fresh), strlen(fresh), NULL, 0, T0, NULL), SWH_NULL_ARGUMENT);
    CHECK(status_of(o, body, sizeof body) == 400); /* still the earlier answer */
    /* None of those recorded the alert: it is new, not a duplicate. */
    CHECK_RESULT(deliver_into(e, TOKEN, fresh, T0 + 4000, &o), SWH_OK);
    CHECK(status_of(o, body, sizeof body) == 200);
    CHECK(strstr(body, "\"status\":\"rejected\"") != NULL);

    /* A freed outcome is not refilled. */
    CHECK_RESULT(swh_outcome_free(o), SWH_OK);
    CHECK_RESULT(deliver_into(e, TOKEN, fresh, T0 + 5000, &o), SWH_INVALID_HANDLE);
    CHECK(strstr(last_error(), "freed") != NULL);
    o = NULL;
    CHECK_RESULT(swh_engine_free(e), SWH_OK);
    CHECK_RESULT(deliver_into(e, TOKEN, fresh, T0, &o), SWH_INVALID_HANDLE);
    CHECK(o == NULL);
}

/* One engine, several threads, the same alert: exactly one is not a duplicate. */
#define THREADS 4
#define PER_THREAD 10

struct counts {
    const swh_engine *engine;
    int rejected, duplicate, other;
};

static void *worker(void *arg) {
    struct counts *c = arg;
    for (int i = 0; i < PER_THREAD; i++) {
        swh_outcome *o = NULL;
        if (deliver(c->engine, TOKEN, REJECTED, T0 + i, &o) != SWH_OK) {
            c->other++;
            continue;
        }
        const char *body = NULL;
        size_t len = 0;
        if (swh_outcome_response(o, &body, &len) != SWH_OK) c->other++;
        else if (strcmp(body, "{\"status\":\"duplicate\"}") == 0) c->duplicate++;
        else if (strstr(body, "\"status\":\"rejected\"") != NULL) c->rejected++;
        else c->other++;
        swh_outcome_free(o);
    }
    return NULL;
}

static void test_threads(void) {
    swh_engine *e = NULL;
    CHECK_RESULT(swh_engine_new(&e), SWH_OK);
    CHECK_RESULT(upsert(e, S1), SWH_OK);
    pthread_t threads[THREADS];
    struct counts counts[THREADS];
    for (int t = 0; t < THREADS; t++) {
        counts[t] = (struct counts){e, 0, 0, 0};
        CHECK(pthread_create(&threads[t], NULL, worker, &counts[t]) == 0);
    }
    int rejected = 0, duplicate = 0, other = 0;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(threads[t], NULL);
        rejected += counts[t].rejected;
        duplicate += counts[t].duplicate;
        other += counts[t].other;
    }
    CHECK(rejected == 1);
    CHECK(duplicate == THREADS * PER_THREAD - 1);
    CHECK(other == 0);
    CHECK_RESULT(swh_engine_free(e), SWH_OK);
}

/* A host that keeps the windows in its own database: it computes the key, claims it, and
   has the engine decide with its answers; the engine's own windows are not touched. */
static swh_result settled(const swh_engine *e, bool room, uint32_t claim, const char *body, swh_outcome **o,
                          bool *counted, bool *keeps) {
    return swh_engine_deliver_settled(e, room, claim, u8(TOKEN), 64, u8(body), strlen(body), JSON, strlen(JSON), T0,
                                      o, counted, keeps);
}

static void test_deliver_settled(void) {
    swh_engine *e = NULL;
    CHECK_RESULT(swh_engine_new(&e), SWH_OK);
    CHECK_RESULT(upsert(e, S1), SWH_OK);
    char body[512];
    uint8_t k1[32], k2[32], k3[32];
    const char *with_id = "{\"ticker\":\"TSLA\",\"action\":\"buy\",\"message_id\":\"m-1\"}";
    const char *same_id = "{\"action\":\"buy\",\"ticker\":\"TSLA\",\"message_id\":\"m-1\"}";
    CHECK_RESULT(swh_dedup_key(u8(with_id), strlen(with_id), JSON, strlen(JSON), k1), SWH_OK);
    CHECK_RESULT(swh_dedup_key(u8(same_id), strlen(same_id), JSON, strlen(JSON), k2), SWH_OK);
    CHECK_RESULT(swh_dedup_key(u8(REJECTED), strlen(REJECTED), NULL, 0, k3), SWH_OK);
    CHECK(memcmp(k1, k2, 32) == 0); /* the same message_id is the same alert */
    CHECK(memcmp(k1, k3, 32) != 0);
    CHECK_RESULT(swh_dedup_key(u8(REJECTED), strlen(REJECTED), NULL, 0, NULL), SWH_NULL_ARGUMENT);

    swh_outcome *o = NULL;
    bool counted = false, keeps = false;
    CHECK_RESULT(settled(e, true, SWH_CLAIM_FRESH, REJECTED, &o, &counted, &keeps), SWH_OK);
    CHECK(o && status_of(o, body, sizeof body) == 200 && strstr(body, "rejected") != NULL);
    CHECK(counted && keeps);
    CHECK_RESULT(swh_outcome_free(o), SWH_OK);
    /* The engine's own windows were not touched: its own delivery of the same body is not a duplicate. */
    CHECK(post(e, TOKEN, REJECTED, T0, body, sizeof body) == 200 && strstr(body, "duplicate") == NULL);
    /* Its own delivery holds the key; a host that could not store that outcome gives the key back. */
    CHECK(post(e, TOKEN, REJECTED, T0 + 1000, body, sizeof body) == 200 && strstr(body, "duplicate") != NULL);
    CHECK_RESULT(swh_engine_release(e, "s1", 2, k3), SWH_OK);
    CHECK_RESULT(swh_engine_release(e, "nope", 4, k3), SWH_UNKNOWN_STRATEGY);
    CHECK_RESULT(swh_engine_release(e, "s1", 2, NULL), SWH_NULL_ARGUMENT);
    CHECK(post(e, TOKEN, REJECTED, T0 + 2000, body, sizeof body) == 200 && strstr(body, "duplicate") == NULL);

    CHECK_RESULT(settled(e, true, SWH_CLAIM_DUPLICATE_FIRST, REJECTED, &o, &counted, &keeps), SWH_OK);
    CHECK(o && status_of(o, body, sizeof body) == 200 && strcmp(body, "{\"status\":\"duplicate\"}") == 0);
    CHECK(counted && !keeps);
    CHECK_RESULT(swh_outcome_free(o), SWH_OK);

    CHECK_RESULT(settled(e, false, SWH_CLAIM_FRESH, REJECTED, &o, &counted, &keeps), SWH_OK);
    CHECK(o && status_of(o, body, sizeof body) == 429);
    CHECK(!counted && !keeps);
    CHECK_RESULT(swh_outcome_free(o), SWH_OK);

    /* A claim that is not one of swh_claim is refused, and nothing is written. */
    o = NULL;
    CHECK_RESULT(settled(e, true, 7, REJECTED, &o, &counted, &keeps), SWH_INVALID_ARGUMENT);
    CHECK(o == NULL && strstr(last_error(), "claim") != NULL);
    CHECK_RESULT(settled(e, true, SWH_CLAIM_FRESH, REJECTED, &o, NULL, &keeps), SWH_NULL_ARGUMENT);
    CHECK(o == NULL);
    CHECK_RESULT(swh_engine_free(e), SWH_OK);
}

int main(void) {
    test_version_and_last_error();
    test_abi_version_and_limits();
    test_engine_upsert_remove_rotate();
    test_deliver();
    test_deliver_settled();
    test_deliver_into();
    test_dry_run();
    test_validate();
    test_parse();
    test_handles();
    test_threads();
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
