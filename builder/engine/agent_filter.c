/* builder/engine/agent_filter.c — see agent_filter.h: the ssh relay's
 * frame reader and read-only request filter. */
#include "builder/engine/agent_filter.h"

#include <stdint.h>

const unsigned char ib_agent_failure_frame[5] = { 0, 0, 0, 1, IB_AGENT_FAILURE };

static uint32_t
get_u32 (const unsigned char *p)
{
  return (uint32_t) p[0] << 24 | (uint32_t) p[1] << 16 | (uint32_t) p[2] << 8 | (uint32_t) p[3];
}

ib_agent_frame_t
ib_agent_frame (const unsigned char *buf, size_t have, size_t *need)
{
  if (have < 4)
    {
      *need = 4;
      return IB_AGENT_FRAME_MORE;
    }
  uint32_t len = get_u32 (buf);
  if (len == 0 || len > IB_AGENT_MSG_MAX)
    {
      *need = 4;
      return IB_AGENT_FRAME_BAD;
    }
  *need = 4 + (size_t) len;
  return have >= *need ? IB_AGENT_FRAME_WHOLE : IB_AGENT_FRAME_MORE;
}

/* An RFC 4251 string at *off of msg[0..len): its bytes and length, *off
 * moved past it; false when it does not fit. */
static bool
get_string (const unsigned char *msg, size_t len, size_t *off, const unsigned char **s,
            size_t *n)
{
  if (len - *off < 4)
    return false;
  uint32_t l = get_u32 (msg + *off);
  if (len - *off - 4 < l)
    return false;
  *s = msg + *off + 4;
  *n = l;
  *off += 4 + (size_t) l;
  return true;
}

/* SSH_AGENTC_SIGN_REQUEST: string key blob, string data, uint32 flags,
 * and nothing more; the key blob starts with a string (the key type), as
 * x/crypto's ServeAgent reads it (wireKey) before it asks the agent. */
static bool
sign_request_ok (const unsigned char *msg, size_t len)
{
  size_t off = 1, blob_len = 0, data_len = 0, type_off = 0, type_len = 0;
  const unsigned char *blob = NULL, *data = NULL, *type = NULL;
  if (!get_string (msg, len, &off, &blob, &blob_len)
      || !get_string (msg, len, &off, &data, &data_len))
    return false;
  if (len - off != 4) /* the flags, then the end */
    return false;
  return get_string (blob, blob_len, &type_off, &type, &type_len);
}

ib_agent_verdict_t
ib_agent_filter_request (const unsigned char *msg, size_t len)
{
  if (len == 0)
    return IB_AGENT_REFUSE;
  switch (msg[0])
    {
    case IB_AGENTC_REQUEST_IDENTITIES:
      return len == 1 ? IB_AGENT_FORWARD : IB_AGENT_REFUSE;
    case IB_AGENTC_SIGN_REQUEST:
      return sign_request_ok (msg, len) ? IB_AGENT_FORWARD : IB_AGENT_REFUSE;
    default:
      /* ADD_IDENTITY, REMOVE_*, LOCK, UNLOCK, smartcard keys, every
       * EXTENSION (session-bind@openssh.com and query included), the
       * protocol-1 numbers and whatever comes later */
      return IB_AGENT_REFUSE;
    }
}

bool
ib_agent_reply_fits (unsigned char request, const unsigned char *msg, size_t len)
{
  if (len == 0)
    return false;
  if (msg[0] == IB_AGENT_FAILURE)
    return true;
  return (request == IB_AGENTC_REQUEST_IDENTITIES && msg[0] == IB_AGENT_IDENTITIES_ANSWER)
         || (request == IB_AGENTC_SIGN_REQUEST && msg[0] == IB_AGENT_SIGN_RESPONSE);
}
