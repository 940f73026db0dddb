/* libFuzzer target: the `--ssh` relay's frame reader and read-only filter
 * (builder/engine/agent_filter.h), as the relay drives them.  The input is
 * a byte stream of agent frames (draft-ietf-sshm-ssh-agent:
 * uint32 length, then the message), read as the relay reads a step's
 * socket: a request, and after a forwarded one the next frame is the
 * agent's reply.  Checked: a frame is read the same whether its bytes come
 * at once or one by one; a length of 0 or over IB_AGENT_MSG_MAX stops the
 * stream; only what BuildKit's read-only agent passes (moby/buildkit
 * session/sshforward/sshprovider/agentprovider.go: REQUEST_IDENTITIES,
 * SIGN_REQUEST) is ever forwarded, and a forwarded SIGN_REQUEST parses
 * as one (checked here by a second reading). */
#include "builder/engine/agent_filter.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t
u32 (const uint8_t *p)
{
  return (uint32_t) p[0] << 24 | (uint32_t) p[1] << 16 | (uint32_t) p[2] << 8 | p[3];
}

/* A second reading of SIGN_REQUEST: string blob (itself starting with a
 * string), string data, uint32 flags, end; in 64-bit arithmetic. */
static int
sign_parses (const uint8_t *m, size_t n)
{
  uint64_t off = 1;
  uint64_t blob_at = 0, blob_len = 0;
  for (int i = 0; i < 2; i++)
    {
      if (off + 4 > n)
        return 0;
      uint64_t l = u32 (m + off);
      if (off + 4 + l > n)
        return 0;
      if (i == 0)
        blob_at = off + 4, blob_len = l;
      off += 4 + l;
    }
  if (off + 4 != n || blob_len < 4 || 4 + (uint64_t) u32 (m + blob_at) > blob_len)
    return 0;
  return 1;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  size_t off = 0;
  int awaiting_reply = 0;
  unsigned char request = 0;
  while (off < size)
    {
      const uint8_t *f = data + off;
      size_t have = size - off, need = 0, need1 = 0;
      ib_agent_frame_t whole = ib_agent_frame (f, have, &need);
      /* byte by byte, as a slow socket gives them: the same answer, and
       * MORE with the same need before that */
      for (size_t k = 0; k <= have; k++)
        {
          ib_agent_frame_t v = ib_agent_frame (f, k, &need1);
          if (v == IB_AGENT_FRAME_BAD)
            {
              if (whole != IB_AGENT_FRAME_BAD || k < 4)
                abort ();
              break;
            }
          if (v == IB_AGENT_FRAME_WHOLE)
            {
              if (whole != IB_AGENT_FRAME_WHOLE || need1 != need || k != need)
                abort ();
              break;
            }
          if (need1 <= k || (k >= 4 && need1 != need))
            abort ();
        }
      if (whole == IB_AGENT_FRAME_BAD)
        {
          uint32_t l = u32 (f);
          if (l != 0 && l <= IB_AGENT_MSG_MAX)
            abort ();
          return 0; /* the relay closes the connection */
        }
      if (whole == IB_AGENT_FRAME_MORE)
        return 0; /* the stream ends inside a frame: closed */
      if (need < 5 || need > 4 + IB_AGENT_MSG_MAX || u32 (f) != need - 4)
        abort ();
      const unsigned char *msg = f + 4;
      size_t len = need - 4;
      if (awaiting_reply)
        {
          int fits = ib_agent_reply_fits (request, msg, len);
          int want = msg[0] == IB_AGENT_FAILURE
                     || (request == IB_AGENTC_REQUEST_IDENTITIES
                         && msg[0] == IB_AGENT_IDENTITIES_ANSWER)
                     || (request == IB_AGENTC_SIGN_REQUEST && msg[0] == IB_AGENT_SIGN_RESPONSE);
          if (fits != want)
            abort ();
          awaiting_reply = 0;
        }
      else if (ib_agent_filter_request (msg, len) == IB_AGENT_FORWARD)
        {
          if (!((msg[0] == IB_AGENTC_REQUEST_IDENTITIES && len == 1)
                || (msg[0] == IB_AGENTC_SIGN_REQUEST && sign_parses (msg, len))))
            abort ();
          request = msg[0];
          awaiting_reply = 1;
        }
      else if ((msg[0] == IB_AGENTC_REQUEST_IDENTITIES && len == 1)
               || (msg[0] == IB_AGENTC_SIGN_REQUEST && sign_parses (msg, len)))
        abort (); /* refused what BuildKit would pass */
      off += need;
    }
  return 0;
}
