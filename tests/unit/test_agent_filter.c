/* tests/unit/test_agent_filter.c — the `--ssh` relay's frame reader and
 * read-only filter (builder/engine/agent_filter.h): what BuildKit's
 * forwarded agent passes (moby/buildkit
 * session/sshforward/sshprovider/agentprovider.go, readOnlyAgent over
 * golang.org/x/crypto ssh/agent/server.go's ServeAgent): REQUEST_IDENTITIES
 * and SIGN_REQUEST; every other message, and a malformed one, is refused;
 * frames of length 0 or over 256 KiB end the stream.  Message numbers and
 * layouts: draft-ietf-sshm-ssh-agent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "builder/engine/agent_filter.h"
#include "common/util.h"

#include <stdlib.h>
#include <string.h>

/* A message being built: bytes and length. */
typedef struct
{
  unsigned char b[1024];
  size_t n;
} msg_t;

static void
put_u32 (msg_t *m, uint32_t v)
{
  m->b[m->n++] = (unsigned char) (v >> 24);
  m->b[m->n++] = (unsigned char) (v >> 16);
  m->b[m->n++] = (unsigned char) (v >> 8);
  m->b[m->n++] = (unsigned char) v;
}

static void
put_bytes (msg_t *m, const void *p, size_t n)
{
  memcpy (m->b + m->n, p, n);
  m->n += n;
}

static void
put_string (msg_t *m, const void *p, size_t n)
{
  put_u32 (m, (uint32_t) n);
  put_bytes (m, p, n);
}

/* An ed25519 public key blob: string "ssh-ed25519", string 32 bytes. */
static msg_t
key_blob (void)
{
  msg_t k = { .n = 0 };
  unsigned char pub[32];
  memset (pub, 0xa5, sizeof pub);
  put_string (&k, "ssh-ed25519", 11);
  put_string (&k, pub, sizeof pub);
  return k;
}

/* SSH_AGENTC_SIGN_REQUEST of `data` by the key above, with `flags`. */
static msg_t
sign_request (const char *data, uint32_t flags)
{
  msg_t k = key_blob (), m = { .n = 0 };
  m.b[m.n++] = IB_AGENTC_SIGN_REQUEST;
  put_string (&m, k.b, k.n);
  put_string (&m, data, strlen (data));
  put_u32 (&m, flags);
  return m;
}

static ib_agent_verdict_t
verdict (const msg_t *m)
{
  return ib_agent_filter_request (m->b, m->n);
}

static void
test_frames (void **state)
{
  (void) state;
  size_t need = 0;
  unsigned char f[16] = { 0, 0, 0, 1, IB_AGENTC_REQUEST_IDENTITIES, 0, 0, 0, 1, 11 };
  /* partial: the length word, then the message */
  assert_int_equal (ib_agent_frame (NULL, 0, &need), IB_AGENT_FRAME_MORE);
  assert_int_equal (need, 4);
  for (size_t have = 1; have < 4; have++)
    {
      assert_int_equal (ib_agent_frame (f, have, &need), IB_AGENT_FRAME_MORE);
      assert_int_equal (need, 4);
    }
  assert_int_equal (ib_agent_frame (f, 4, &need), IB_AGENT_FRAME_MORE);
  assert_int_equal (need, 5);
  assert_int_equal (ib_agent_frame (f, 5, &need), IB_AGENT_FRAME_WHOLE);
  assert_int_equal (need, 5);
  /* a second frame behind it (pipelined) is not looked at */
  assert_int_equal (ib_agent_frame (f, 10, &need), IB_AGENT_FRAME_WHOLE);
  assert_int_equal (need, 5);

  /* zero length: ServeAgent's "request size is 0" */
  unsigned char zero[5] = { 0, 0, 0, 0, 11 };
  assert_int_equal (ib_agent_frame (zero, 5, &need), IB_AGENT_FRAME_BAD);
  /* the bound, and one over */
  unsigned char max[4] = { 0, 0x04, 0, 0 }; /* 256 KiB */
  assert_int_equal (IB_AGENT_MSG_MAX, 0x40000);
  assert_int_equal (ib_agent_frame (max, 4, &need), IB_AGENT_FRAME_MORE);
  assert_int_equal (need, 4 + IB_AGENT_MSG_MAX);
  unsigned char over[4] = { 0, 0x04, 0, 1 };
  assert_int_equal (ib_agent_frame (over, 4, &need), IB_AGENT_FRAME_BAD);
  unsigned char huge[4] = { 0xff, 0xff, 0xff, 0xff };
  assert_int_equal (ib_agent_frame (huge, 4, &need), IB_AGENT_FRAME_BAD);
  /* ASCII ("ping") read as a length: 1.8 GB */
  assert_int_equal (ib_agent_frame ((const unsigned char *) "ping", 4, &need),
                    IB_AGENT_FRAME_BAD);

  /* the failure frame the relay answers with */
  assert_memory_equal (ib_agent_failure_frame, "\0\0\0\1\5", 5);
  assert_int_equal (ib_agent_frame (ib_agent_failure_frame, 5, &need), IB_AGENT_FRAME_WHOLE);
}

static void
test_allowed (void **state)
{
  (void) state;
  unsigned char list[] = { IB_AGENTC_REQUEST_IDENTITIES };
  assert_int_equal (ib_agent_filter_request (list, 1), IB_AGENT_FORWARD);
  msg_t s = sign_request ("session id and userauth request", 0);
  assert_int_equal (verdict (&s), IB_AGENT_FORWARD);
  /* flags: SSH_AGENT_RSA_SHA2_256 (2), _512 (4), passed as ServeAgent does */
  s = sign_request ("x", 2);
  assert_int_equal (verdict (&s), IB_AGENT_FORWARD);
  s = sign_request ("x", 4);
  assert_int_equal (verdict (&s), IB_AGENT_FORWARD);
  s = sign_request ("", 0); /* empty data is well-formed */
  assert_int_equal (verdict (&s), IB_AGENT_FORWARD);
}

static void
test_refused (void **state)
{
  (void) state;
  msg_t k = key_blob ();
  msg_t m;
  /* SSH_AGENTC_REMOVE_ALL_IDENTITIES: the first hole of issue 38 */
  unsigned char remove_all[] = { IB_AGENTC_REMOVE_ALL_IDENTITIES };
  assert_int_equal (ib_agent_filter_request (remove_all, 1), IB_AGENT_REFUSE);
  /* SSH_AGENTC_LOCK with the recipe's password */
  m = (msg_t){ .n = 0 };
  m.b[m.n++] = IB_AGENTC_LOCK;
  put_string (&m, "recipe-password", 15);
  assert_int_equal (verdict (&m), IB_AGENT_REFUSE);
  m.b[0] = IB_AGENTC_UNLOCK;
  assert_int_equal (verdict (&m), IB_AGENT_REFUSE);
  /* SSH_AGENTC_ADD_IDENTITY (and constrained) of an ed25519 key */
  m = (msg_t){ .n = 0 };
  m.b[m.n++] = IB_AGENTC_ADD_IDENTITY;
  unsigned char priv[64] = { 0 };
  put_string (&m, "ssh-ed25519", 11);
  put_string (&m, priv + 32, 32);
  put_string (&m, priv, 64);
  put_string (&m, "planted", 7);
  assert_int_equal (verdict (&m), IB_AGENT_REFUSE);
  m.b[0] = IB_AGENTC_ADD_ID_CONSTRAINED;
  m.b[m.n++] = 2; /* SSH_AGENT_CONSTRAIN_CONFIRM */
  assert_int_equal (verdict (&m), IB_AGENT_REFUSE);
  /* SSH_AGENTC_REMOVE_IDENTITY of the key */
  m = (msg_t){ .n = 0 };
  m.b[m.n++] = IB_AGENTC_REMOVE_IDENTITY;
  put_string (&m, k.b, k.n);
  assert_int_equal (verdict (&m), IB_AGENT_REFUSE);
  /* smartcard keys */
  m = (msg_t){ .n = 0 };
  m.b[m.n++] = IB_AGENTC_ADD_SMARTCARD_KEY;
  put_string (&m, "/usr/lib/x86_64-linux-gnu/opensc-pkcs11.so", 42);
  put_string (&m, "1234", 4);
  assert_int_equal (verdict (&m), IB_AGENT_REFUSE);
  m.b[0] = IB_AGENTC_REMOVE_SMARTCARD_KEY;
  assert_int_equal (verdict (&m), IB_AGENT_REFUSE);
  m.b[0] = IB_AGENTC_ADD_SMARTCARD_KEY_CONSTRAINED;
  assert_int_equal (verdict (&m), IB_AGENT_REFUSE);
  /* every extension: query, session-bind@openssh.com (BuildKit refuses
   * them all) */
  m = (msg_t){ .n = 0 };
  m.b[m.n++] = IB_AGENTC_EXTENSION;
  put_string (&m, "query", 5);
  assert_int_equal (verdict (&m), IB_AGENT_REFUSE);
  m = (msg_t){ .n = 0 };
  m.b[m.n++] = IB_AGENTC_EXTENSION;
  put_string (&m, "session-bind@openssh.com", 24);
  put_string (&m, k.b, k.n);
  put_string (&m, "sid", 3);
  put_string (&m, "sig", 3);
  m.b[m.n++] = 0;
  assert_int_equal (verdict (&m), IB_AGENT_REFUSE);
  /* every type but 11 and 13, alone or with contents */
  for (int t = 0; t < 256; t++)
    {
      unsigned char one[1] = { (unsigned char) t };
      unsigned char more[5] = { (unsigned char) t, 0, 0, 0, 0 };
      ib_agent_verdict_t want = t == IB_AGENTC_REQUEST_IDENTITIES ? IB_AGENT_FORWARD
                                                                  : IB_AGENT_REFUSE;
      assert_int_equal (ib_agent_filter_request (one, 1), want);
      assert_int_equal (ib_agent_filter_request (more, 5), IB_AGENT_REFUSE);
    }
  /* zero length (never forwarded: the framing closes first) */
  assert_int_equal (ib_agent_filter_request (remove_all, 0), IB_AGENT_REFUSE);
}

static void
test_malformed (void **state)
{
  (void) state;
  /* REQUEST_IDENTITIES with contents */
  unsigned char list[] = { IB_AGENTC_REQUEST_IDENTITIES, 0 };
  assert_int_equal (ib_agent_filter_request (list, 2), IB_AGENT_REFUSE);
  /* a sign request cut anywhere */
  msg_t s = sign_request ("data", 0);
  for (size_t n = 0; n < s.n; n++)
    assert_int_equal (ib_agent_filter_request (s.b, n), IB_AGENT_REFUSE);
  /* one byte too many */
  s.b[s.n++] = 0;
  assert_int_equal (verdict (&s), IB_AGENT_REFUSE);
  /* a string length past the end, and one that wraps */
  s = sign_request ("data", 0);
  s.b[1] = 0x7f; /* the key blob's length: 0x7f000033 */
  assert_int_equal (verdict (&s), IB_AGENT_REFUSE);
  s = sign_request ("data", 0);
  memset (s.b + 1, 0xff, 4);
  assert_int_equal (verdict (&s), IB_AGENT_REFUSE);
  /* a key blob that is no string (the key type) */
  msg_t m = { .n = 0 };
  m.b[m.n++] = IB_AGENTC_SIGN_REQUEST;
  put_string (&m, "\0\0", 2);
  put_string (&m, "data", 4);
  put_u32 (&m, 0);
  assert_int_equal (verdict (&m), IB_AGENT_REFUSE);
  m = (msg_t){ .n = 0 };
  m.b[m.n++] = IB_AGENTC_SIGN_REQUEST;
  put_string (&m, "\0\0\0\x09ssh", 7); /* claims 9 bytes of type, has 3 */
  put_string (&m, "data", 4);
  put_u32 (&m, 0);
  assert_int_equal (verdict (&m), IB_AGENT_REFUSE);
  /* no flags */
  m = (msg_t){ .n = 0 };
  msg_t k = key_blob ();
  m.b[m.n++] = IB_AGENTC_SIGN_REQUEST;
  put_string (&m, k.b, k.n);
  put_string (&m, "data", 4);
  assert_int_equal (verdict (&m), IB_AGENT_REFUSE);
}

static void
test_replies (void **state)
{
  (void) state;
  unsigned char fail[] = { IB_AGENT_FAILURE }, ok[] = { IB_AGENT_SUCCESS };
  unsigned char ids[] = { IB_AGENT_IDENTITIES_ANSWER, 0, 0, 0, 0 };
  unsigned char sig[] = { IB_AGENT_SIGN_RESPONSE, 0, 0, 0, 0 };
  assert_true (ib_agent_reply_fits (IB_AGENTC_REQUEST_IDENTITIES, fail, 1));
  assert_true (ib_agent_reply_fits (IB_AGENTC_SIGN_REQUEST, fail, 1));
  assert_true (ib_agent_reply_fits (IB_AGENTC_REQUEST_IDENTITIES, ids, sizeof ids));
  assert_true (ib_agent_reply_fits (IB_AGENTC_SIGN_REQUEST, sig, sizeof sig));
  assert_false (ib_agent_reply_fits (IB_AGENTC_REQUEST_IDENTITIES, sig, sizeof sig));
  assert_false (ib_agent_reply_fits (IB_AGENTC_SIGN_REQUEST, ids, sizeof ids));
  assert_false (ib_agent_reply_fits (IB_AGENTC_SIGN_REQUEST, ok, 1));
  assert_false (ib_agent_reply_fits (IB_AGENTC_SIGN_REQUEST, fail, 0));
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_frames),
    cmocka_unit_test (test_allowed),
    cmocka_unit_test (test_refused),
    cmocka_unit_test (test_malformed),
    cmocka_unit_test (test_replies),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
