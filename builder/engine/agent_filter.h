/* builder/engine/agent_filter.h — what a step may say to the user's ssh
 * agent: the frame reader and the request filter of the `--ssh` relay
 * (secrets.c), pure (no I/O, no allocation, no global state), so that the
 * relay, a unit test and a fuzz target drive the same code.
 *
 * The protocol: draft-ietf-sshm-ssh-agent, section 3 "Protocol
 * Overview" for the framing (a uint32 length, big-endian, then that many
 * bytes: a message-type byte and its contents), section 5 "Protocol
 * Messages" for the messages, the IANA registry of the same document for
 * their numbers (below).
 *
 * The policy is BuildKit's read-only forwarded agent
 * (moby/buildkit session/sshforward/sshprovider/agentprovider.go:
 * readOnlyAgent over golang.org/x/crypto/ssh/agent's ServeAgent, in
 * ssh/agent/server.go): a step may list the agent's identities
 * (SSH_AGENTC_REQUEST_IDENTITIES) and ask for a signature
 * (SSH_AGENTC_SIGN_REQUEST); adding, removing, locking and every
 * extension are refused.  Refused here as well, unlike BuildKit: UNLOCK
 * (BuildKit's readOnlyAgent leaves Unlock to the agent; a step has no
 * business unlocking what the user locked, nor guessing the password)
 * and the protocol-1 messages ServeAgent answers itself (1 and 9: no
 * agent has such keys since OpenSSH 7.6).  Every refusal is answered
 * SSH_AGENT_FAILURE, which the draft asks for an unsupported extension
 * too (BuildKit answers an extension SSH_AGENT_EXTENSION_FAILURE).
 * No extension passes, session-bind@openssh.com included, as in
 * BuildKit: OpenSSH's ssh goes on without it (the bind is advisory
 * except for keys added with destination constraints, `ssh-add -h`,
 * which then cannot be used from a build, under BuildKit either).
 *
 * Units: bytes.  Buffers are borrowed for the call only.  Nothing here
 * fails in the ib_error_t sense: each function returns a verdict. */
#ifndef IB_BUILDER_AGENT_FILTER_H
#define IB_BUILDER_AGENT_FILTER_H

#include <stdbool.h>
#include <stddef.h>

/* The largest message (the bytes after the length word) the relay reads,
 * request or reply: OpenSSH's ssh-agent drops a connection whose request
 * is longer (ssh-agent.c, AGENT_MAX_LEN) and its clients refuse a longer
 * reply (authfd.c, MAX_AGENT_REPLY_LEN), both 256 KiB.  BuildKit's
 * (x/crypto's maxAgentResponseBytes) is 16 MiB; 256 KiB bounds what a
 * step can make imgbuild hold per connection and loses nothing an
 * OpenSSH agent would have answered. */
#define IB_AGENT_MSG_MAX ((size_t) 256 * 1024)

/* Message numbers (the draft's "Message numbers" registry). */
enum
{
  IB_AGENT_FAILURE = 5,
  IB_AGENT_SUCCESS = 6,
  IB_AGENTC_REQUEST_IDENTITIES = 11,
  IB_AGENT_IDENTITIES_ANSWER = 12,
  IB_AGENTC_SIGN_REQUEST = 13,
  IB_AGENT_SIGN_RESPONSE = 14,
  IB_AGENTC_ADD_IDENTITY = 17,
  IB_AGENTC_REMOVE_IDENTITY = 18,
  IB_AGENTC_REMOVE_ALL_IDENTITIES = 19,
  IB_AGENTC_ADD_SMARTCARD_KEY = 20,
  IB_AGENTC_REMOVE_SMARTCARD_KEY = 21,
  IB_AGENTC_LOCK = 22,
  IB_AGENTC_UNLOCK = 23,
  IB_AGENTC_ADD_ID_CONSTRAINED = 25,
  IB_AGENTC_ADD_SMARTCARD_KEY_CONSTRAINED = 26,
  IB_AGENTC_EXTENSION = 27,
  IB_AGENT_EXTENSION_FAILURE = 28,
};

typedef enum
{
  IB_AGENT_FRAME_MORE,  /* *need bytes are needed in all (> have) */
  IB_AGENT_FRAME_WHOLE, /* the frame is the first *need bytes */
  IB_AGENT_FRAME_BAD,   /* a length of 0 or over IB_AGENT_MSG_MAX: the
                           stream cannot go on (close the connection) */
} ib_agent_frame_t;

/* Given the first `have` bytes of a frame in `buf` (NULL when have is 0),
 * whether it is whole and how long it is: *need is 4 while the length word
 * is incomplete, then 4 + the length.  Bytes beyond the frame are not
 * looked at. */
ib_agent_frame_t ib_agent_frame (const unsigned char *buf, size_t have, size_t *need);

typedef enum
{
  IB_AGENT_FORWARD, /* pass the frame to the agent, its reply back */
  IB_AGENT_REFUSE,  /* answer SSH_AGENT_FAILURE, the agent sees nothing */
} ib_agent_verdict_t;

/* The verdict on one request message `msg` of `len` bytes (the frame
 * without its length word; len 0 is refused).  Forwarded: exactly
 * REQUEST_IDENTITIES (the type byte alone) and a well-formed SIGN_REQUEST
 * (string key blob, itself starting with a string, the key type; string
 * data; uint32 flags; nothing after), as ServeAgent parses them before it
 * asks the agent.  Everything else, malformed ones included, is refused. */
ib_agent_verdict_t ib_agent_filter_request (const unsigned char *msg, size_t len);

/* Whether reply message `msg` (`len` bytes, without its length word) may
 * answer a forwarded request of type `request`: SSH_AGENT_FAILURE, or
 * IDENTITIES_ANSWER to REQUEST_IDENTITIES, SIGN_RESPONSE to SIGN_REQUEST.
 * The relay sends SSH_AGENT_FAILURE in place of any other. */
bool ib_agent_reply_fits (unsigned char request, const unsigned char *msg, size_t len);

/* The whole SSH_AGENT_FAILURE frame: length 1, type 5. */
extern const unsigned char ib_agent_failure_frame[5];

#endif
