"""Build secrets and ssh agents (docker buildx build --secret / --ssh,
RUN --mount=type=secret|ssh): the step reads them; no layer, config,
history, cache record, plan, log or output holds their bytes; no mount
stub reaches a layer; the cache key ignores their content, as BuildKit's."""
import gzip
import hashlib
import json
import os
import secrets
import signal
import subprocess
import tarfile
from pathlib import Path

import pytest

from conftest import imgbuild, write

# A client of the ssh agent protocol (draft-miller-ssh-agent,
# SSH_AGENTC_REQUEST_IDENTITIES = 11, SSH_AGENT_IDENTITIES_ANSWER = 12) in
# the perl that Debian's minbase has (no ssh-add there): one line per key,
# the key blob in hex and its comment.
AGENT_PL = r"""
use IO::Socket::UNIX;
my $s = IO::Socket::UNIX->new(Peer => $ENV{SSH_AUTH_SOCK}) or die "connect $ENV{SSH_AUTH_SOCK}: $!";
print $s pack("NC", 1, 11);
read($s, my $h, 4) == 4 or die "short answer";
my $n = unpack("N", $h);
read($s, my $b, $n) == $n or die "short answer";
my ($t, $k) = unpack("CN", $b);
die "answer type $t" unless $t == 12;
my $o = 5;
for (1 .. $k) {
  my $l = unpack("N", substr($b, $o, 4)); $o += 4;
  my $blob = substr($b, $o, $l); $o += $l;
  my $cl = unpack("N", substr($b, $o, 4)); $o += 4;
  my $c = substr($b, $o, $cl); $o += $cl;
  print unpack("H*", $blob), " $c\n";
}
"""


def mode_in_force():
    if os.geteuid() == 0:
        return "root"
    return "single" if os.environ.get("IMGBUILD_USERNS") == "single" else "map"


@pytest.fixture(scope="module")
def sstore(tmp_path_factory, registry, base_image):
    store = tmp_path_factory.mktemp("secrets-store")
    assert imgbuild("pull", base_image, store=store).rc == 0
    return store


def sha(b):
    return hashlib.sha256(b).hexdigest()


def blobs_of(data):
    """`data`, and its gunzipped bytes when it is gzip (layers)."""
    out = [data]
    if data[:2] == b"\x1f\x8b":
        try:
            out.append(gzip.decompress(data))
        except (OSError, EOFError):
            pass
    return out


def holders(root, needles):
    """Files under `root` (a file or a tree) whose bytes, gunzipped bytes, or
    the members of a tar among them (docker-archive layers) hold a needle."""
    found = []
    root = Path(root)
    files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
    for p in files:
        try:
            data = p.read_bytes()
        except OSError:
            continue  # a socket, a file of a subordinate id
        parts = blobs_of(data)
        if p.suffix == ".tar" or data[257:262] == b"ustar":
            try:
                with tarfile.open(p) as t:
                    for m in t.getmembers():
                        if m.isfile():
                            parts += blobs_of(t.extractfile(m).read())
            except tarfile.TarError:
                pass
        if any(n in part for part in parts for n in needles):
            found.append(str(p))
    return found


def layer_names(store, ref):
    """Every path in every layer of the image."""
    m = json.loads(imgbuild("inspect", ref, store=store).out)
    names = set()
    for layer in m["manifest"]["layers"]:
        with tarfile.open(Path(store) / "blobs/sha256" / layer["digest"].split(":")[1]) as t:
            names |= set(n.lstrip("./").rstrip("/") for n in t.getnames())
    return names


def recipe_text(base_image, out):
    return f"""
FROM {base_image}
RUN mkdir /results
RUN --mount=type=secret,id=tok sha256sum /run/secrets/tok | cut -d' ' -f1 > /results/file
RUN --mount=type=secret,id=envtok,target=/etc/pip/token \\
    sh -c 'sha256sum /etc/pip/token | cut -d" " -f1 > /results/target; (echo x >> /etc/pip/token) 2>/dev/null && echo writable > /results/target-ro || echo ro > /results/target-ro'
RUN --mount=type=secret,id=tok,env=TOKEN \\
    sh -c 'printf %s "$TOKEN" | sha256sum | cut -d" " -f1 > /results/env; test -e /run/secrets/tok && echo file > /results/env-file || echo nofile > /results/env-file'
RUN --mount=type=secret,id=tok,env=TOKEN,target=/run/secrets/both \\
    sh -c 'printf %s "$TOKEN" | cmp - /run/secrets/both && echo same > /results/both'
RUN --mount=type=secret,id=tok,mode=0440,uid=1234,gid=2345 stat -c '%a %u %g' /run/secrets/tok > /results/stat
RUN --mount=type=secret,id=tok stat -c '%a %u %g' /run/secrets/tok > /results/stat-default
RUN --mount=type=secret,id=absent \\
    sh -c 'test -e /run/secrets/absent && echo present > /results/optional || echo absent > /results/optional'
RUN sh -c 'env | grep -c "^TOKEN=" > /results/env-after; ls /run/secrets > /results/ls-after 2>&1 || true'
OUTPUT type=image,name=secrets:one
OUTPUT type=oci,dest={out}/oci
OUTPUT type=docker,dest={out}/image.tar,name=secrets:one
OUTPUT type=local,dest={out}/results,src=/results
"""


def test_secrets_read_in_steps_and_kept_nowhere(sstore, base_image, tmp_path):
    token = secrets.token_hex(16).encode()     # 32 random bytes (hex digits)
    token2 = secrets.token_hex(16).encode()
    ctx = tmp_path / "ctx"
    out = tmp_path / "out"
    recipe = write(ctx / "r.recipe", recipe_text(base_image, out))
    write(tmp_path / "tok.txt", token)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {"IB_TEST_SECRET": token2.decode(), "TMPDIR": str(tmpdir)}
    args = ["--secret", f"id=tok,src={tmp_path / 'tok.txt'}",
            "--secret", "id=envtok,env=IB_TEST_SECRET"]
    r = imgbuild("build", "--progress=plain", recipe, *args, store=sstore, cwd=ctx, env=env)
    assert r.rc == 0, r
    res = out / "results"
    assert (res / "file").read_text().strip() == sha(token)
    assert (res / "target").read_text().strip() == sha(token2)
    assert (res / "target-ro").read_text().strip() == "ro"
    assert (res / "env").read_text().strip() == sha(token)
    assert (res / "env-file").read_text().strip() == "nofile"  # env= alone: no file
    assert (res / "both").read_text().strip() == "same"
    expected_owner = "0 0" if mode_in_force() == "single" else "1234 2345"
    assert (res / "stat").read_text().strip() == f"440 {expected_owner}"
    assert (res / "stat-default").read_text().strip() == "400 0 0"
    assert (res / "optional").read_text().strip() == "absent"
    assert (res / "env-after").read_text().strip() == "0"
    assert "No such file" in (res / "ls-after").read_text()  # the stub dir went with the mount

    # no mount stub in any layer: /run/secrets, its files, /etc/pip
    names = layer_names(sstore, "secrets:one")
    assert not [n for n in names if n.startswith(("run/secrets", "etc/pip"))], sorted(names)
    # the private directory is gone
    assert list(tmpdir.iterdir()) == []

    plan_text = imgbuild("plan", recipe, store=sstore, cwd=ctx)
    plan_json = imgbuild("plan", "--json", recipe, store=sstore, cwd=ctx)
    assert plan_text.rc == 0 and plan_json.rc == 0, (plan_text, plan_json)
    assert "type=secret,id=tok" in plan_text.out
    needles = [token, token2]
    for text in (r.out, r.err, plan_text.out, plan_text.err, plan_json.out):
        assert not any(n.decode() in text for n in needles), text
    # every file of the store (blobs gunzipped, cache records, snapshots,
    # index) and of the outputs
    assert (Path(sstore) / "cache").is_dir()
    assert holders(sstore, needles) == []
    # (the search does see inside: the secret's hash, written by a step, is
    # found in a gzipped layer, a cache record names the command)
    assert [p for p in holders(sstore, [sha(token).encode()]) if "/blobs/" in p]
    assert [p for p in holders(sstore, [b"/run/secrets/tok > /results/stat"]) if "/cache/" in p]
    assert holders(out / "image.tar", [sha(token).encode()])
    assert holders(out, needles) == []
    assert holders(tmp_path / "ctx", needles) == []

    # BuildKit: a secret's content is no part of the cache key
    write(tmp_path / "tok.txt", secrets.token_hex(16))
    again = imgbuild("build", "--progress=plain", recipe, *args, store=sstore, cwd=ctx,
                     env={**env, "IB_TEST_SECRET": "changed"})
    assert again.rc == 0, again
    runs = [l for l in again.err.splitlines() if "] RUN" in l]
    assert runs and all(l.endswith(" CACHED") for l in runs), again.err
    assert (res / "file").read_text().strip() == sha(token)


def test_secret_id_alone_and_sources(sstore, base_image, tmp_path):
    """--secret id=ID: the variable ID when set, else the file ID (BuildKit);
    type=env; source= in the mount is id=; target's basename is the id."""
    token = secrets.token_hex(16)
    ctx = tmp_path / "ctx"
    write(ctx / "filetok", token + "-file")
    out = tmp_path / "out"
    recipe = write(ctx / "r.recipe", f"""
FROM {base_image}
RUN --mount=type=secret,id=IB_ENVTOK sh -c 'mkdir /results; cat /run/secrets/IB_ENVTOK | sha256sum | cut -d" " -f1 > /results/a'
RUN --mount=type=secret,source=filetok sh -c 'sha256sum < /run/secrets/filetok | cut -d" " -f1 > /results/b'
RUN --mount=type=secret,target=/x/typed sh -c 'sha256sum < /x/typed | cut -d" " -f1 > /results/c'
OUTPUT type=local,dest={out},src=/results
""")
    r = imgbuild("build", recipe, "--secret", "id=IB_ENVTOK", "--secret", "id=filetok",
                 "--secret", "id=typed,type=env,src=IB_TYPED", store=sstore, cwd=ctx,
                 env={"IB_ENVTOK": token, "IB_TYPED": token + "-typed"})
    assert r.rc == 0, r
    assert (out / "a").read_text().strip() == sha(token.encode())
    assert (out / "b").read_text().strip() == sha((token + "-file").encode())
    assert (out / "c").read_text().strip() == sha((token + "-typed").encode())


def test_secrets_in_parallel_stages(sstore, base_image, tmp_path):
    """-j 2: each stage's process mounts the secret on its own."""
    token = secrets.token_hex(16)
    out = tmp_path / "out"
    stage = "RUN --mount=type=secret,id=tok,required sh -c 'sha256sum /run/secrets/tok | cut -d\" \" -f1 > /{0}; sleep 1'"
    recipe = write(tmp_path / "r.recipe", f"""
FROM {base_image} AS a
{stage.format("a")}
FROM {base_image} AS b
{stage.format("b")}
FROM {base_image}
COPY --from=a /a /results/a
COPY --from=b /b /results/b
OUTPUT type=local,dest={out},src=/results
""")
    r = imgbuild("build", "-j", "2", recipe, "--secret", "id=tok,env=IB_TEST_TOK", store=sstore,
                 cwd=tmp_path, env={"IB_TEST_TOK": token})
    assert r.rc == 0, r
    assert (out / "a").read_text().strip() == sha(token.encode())
    assert (out / "b").read_text().strip() == sha(token.encode())


def test_run_takes_secrets(sstore, base_image, tmp_path):
    """`imgbuild run --secret` for its --mount=type=secret (a relative src=
    is the caller's)."""
    token = secrets.token_hex(16)
    write(tmp_path / "tok", token)
    r = imgbuild("run", "--secret", "id=tok,src=tok", "--mount=type=secret,id=tok,env=T",
                 "--mount=type=secret,id=tok", base_image, "--", "sh", "-c",
                 'printf %s "$T" | sha256sum; sha256sum < /run/secrets/tok',
                 store=sstore, cwd=tmp_path)
    assert r.rc == 0, r
    assert r.out.split() == [sha(token.encode()), "-"] * 2, r.out
    missing = imgbuild("run", "--mount=type=secret,id=tok,required", base_image, "--", "true",
                       store=sstore, cwd=tmp_path)
    assert missing.rc != 0 and "secret tok: not given" in missing.err, missing


@pytest.mark.parametrize("line,args,words", [
    ("RUN --mount=type=secret,id=needed,required=true true", [],
     ["r.recipe:3", "secret needed: not given", "--secret id=needed"]),
    ("RUN --mount=type=secret,id=needed,required true", [],
     ["r.recipe:3", "secret needed: not given"]),
    ("RUN --mount=type=ssh,required=true true", [],
     ["r.recipe:3", "ssh agent default: not given"]),
    ("RUN --mount=type=secret,id=a,source=b true", [], ["give id= or source=, not both"]),
    ("RUN --mount=type=secret true", [], ["a secret mount needs id= or target="]),
    ("RUN --mount=type=cache,target=/c,required true", [], ["required= is for type=secret"]),
    ("RUN true", ["--secret", "id=x,src=/nonexistent/file"],
     ["--secret id=x: /nonexistent/file: No such file or directory"]),
    ("RUN true", ["--secret", "id=x,env=IB_SURELY_UNSET_VAR"],
     ["--secret id=x: variable IB_SURELY_UNSET_VAR is not set"]),
    ("RUN true", ["--secret", "src=/etc/hostname"], ["--secret src=/etc/hostname: id= is missing"]),
    ("RUN true", ["--secret", "id=x,bogus=1"], ["unknown key 'bogus'"]),
    ("RUN true", ["--ssh", "k=/etc/hostname"], ["--ssh k: /etc/hostname is not a socket"]),
])
def test_secret_errors_are_clear(sstore, base_image, tmp_path, line, args, words):
    recipe = write(tmp_path / "r.recipe", f"FROM {base_image}\nRUN echo before > /before\n{line}\n")
    before = sorted(p.name for p in (Path(sstore) / "blobs/sha256").iterdir())
    r = imgbuild("build", recipe, *args, store=sstore, cwd=tmp_path,
                 env={"SSH_AUTH_SOCK": ""})
    assert r.rc != 0, r
    for w in words:
        assert w in r.err, (w, r.err)
    if args:  # refused before anything ran
        assert sorted(p.name for p in (Path(sstore) / "blobs/sha256").iterdir()) == before


def test_failed_step_keeps_no_secret(sstore, base_image, tmp_path):
    """A failing step's output and --keep-on-failure's printed command
    (which repeats the step's environment) hold no env= secret."""
    token = secrets.token_hex(16)
    recipe = write(tmp_path / "r.recipe", f"""
FROM {base_image}
RUN --mount=type=secret,id=tok,env=TOKEN sh -c 'test -n "$TOKEN" && echo failing on purpose; exit 3'
""")
    r = imgbuild("build", "--keep-on-failure", recipe, "--secret", "id=tok,env=IB_TEST_TOK",
                 store=sstore, cwd=tmp_path, env={"IB_TEST_TOK": token})
    assert r.rc != 0, r
    assert "failing on purpose" in r.err and "exit status 3" in r.err, r.err
    assert "run --rootfs" in r.err, r.err          # the command was printed
    assert token not in r.err + r.out
    assert "TOKEN=" not in r.err
    assert holders(sstore, [token.encode()]) == []


@pytest.fixture
def agent(tmp_path):
    """An ssh-agent on a socket of its own, holding one new ed25519 key:
    (socket, the key blob in hex, its comment)."""
    sock = tmp_path / "agent.sock"
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        key = tmp_path / "id_test"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "imgbuild-test-key",
                        "-f", str(key)], check=True)
        for _ in range(100):
            if sock.exists():
                break
            subprocess.run(["sleep", "0.05"])
        subprocess.run(["ssh-add", "-q", str(key)], check=True, capture_output=True,
                       env={**os.environ, "SSH_AUTH_SOCK": str(sock)})
        import base64
        blob = base64.b64decode(key.with_suffix(".pub").read_text().split()[1]).hex()
        yield sock, blob, "imgbuild-test-key"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def test_ssh_agent_forwarded(sstore, base_image, tmp_path, agent):
    sock, blob, comment = agent
    ctx = tmp_path / "ctx"
    write(ctx / "agent.pl", AGENT_PL)
    out = tmp_path / "out"
    recipe = write(ctx / "r.recipe", f"""
FROM {base_image}
RUN mkdir -m 1777 /results
RUN --mount=type=ssh --mount=type=bind,source=agent.pl,target=/agent.pl \\
    sh -c 'echo "$SSH_AUTH_SOCK" > /results/sock; stat -c "%a %u %g" "$SSH_AUTH_SOCK" > /results/sock-stat; perl /agent.pl > /results/default'
RUN --mount=type=ssh,id=other,target=/tmp/agent.sock,mode=0666 --mount=type=bind,source=agent.pl,target=/agent.pl \\
    sh -c 'stat -c "%a" /tmp/agent.sock > /results/other-stat; SSH_AUTH_SOCK=/tmp/agent.sock perl /agent.pl > /results/other'
USER 1234:1234
RUN --mount=type=ssh,uid=1234,gid=1234 --mount=type=bind,source=agent.pl,target=/agent.pl \\
    perl /agent.pl > /results/as-user
RUN --mount=type=ssh,id=absent sh -c 'echo "$SSH_AUTH_SOCK $(test -e "$SSH_AUTH_SOCK" && echo there || echo absent)" > /results/absent'
ENV SSH_AUTH_SOCK=/tmp/custom.sock
RUN --mount=type=ssh,target=/tmp/custom.sock,uid=1234 --mount=type=bind,source=agent.pl,target=/agent.pl \
    sh -c 'echo "$SSH_AUTH_SOCK" > /results/custom-sock; perl /agent.pl > /results/custom'
OUTPUT type=image,name=secrets:ssh
OUTPUT type=local,dest={out},src=/results
""")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    r = imgbuild("build", recipe, "--ssh", "default", "--ssh", f"other={sock}", store=sstore,
                 cwd=ctx, env={"SSH_AUTH_SOCK": str(sock), "TMPDIR": str(tmpdir)})
    assert r.rc == 0, r
    want = f"{blob} {comment}"
    assert (out / "sock").read_text().strip() == "/run/buildkit/ssh_agent.0"
    assert (out / "sock-stat").read_text().strip() == "600 0 0"
    assert (out / "default").read_text().strip() == want
    assert (out / "other-stat").read_text().strip() == "666"
    assert (out / "other").read_text().strip() == want
    assert (out / "as-user").read_text().strip() == want
    # as BuildKit: SSH_AUTH_SOCK names the first ssh mount's target, even
    # an optional one left out
    assert (out / "absent").read_text().strip() == "/run/buildkit/ssh_agent.0 absent"
    # the stage's own SSH_AUTH_SOCK is kept (BuildKit's llb)
    assert (out / "custom-sock").read_text().strip() == "/tmp/custom.sock"
    assert (out / "custom").read_text().strip() == want
    names = layer_names(sstore, "secrets:ssh")
    assert not [n for n in names if n.startswith(("run/buildkit", "tmp/agent.sock", "tmp/custom.sock"))], sorted(names)
    assert list(tmpdir.iterdir()) == []


# The ssh agent protocol (draft-ietf-sshm-ssh-agent): a frame is
# a uint32 length and the message; strings are a uint32 length and bytes.
SSH_AGENT_FAILURE = 5


def agent_string(b):
    b = b.encode() if isinstance(b, str) else b
    return len(b).to_bytes(4, "big") + b


def agent_call(sock, body):
    """One request to the agent at `sock` (the user's side, no relay): its
    reply message."""
    import socket
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(sock))
        s.sendall(len(body).to_bytes(4, "big") + body)
        n = int.from_bytes(s.recv(4, socket.MSG_WAITALL), "big")
        return s.recv(n, socket.MSG_WAITALL)


def ed25519_add_identity(key):
    """SSH_AGENTC_ADD_IDENTITY (17) of the unencrypted ed25519 key file
    `key` (ssh-keygen's openssh-key-v1 format, PROTOCOL.key): its private
    section holds exactly the agent's fields (type, public, private,
    comment)."""
    import base64
    text = key.read_text().splitlines()
    raw = base64.b64decode("".join(l for l in text if not l.startswith("-----")))
    magic = b"openssh-key-v1\0"
    assert raw.startswith(magic)
    off = len(magic)

    def string():
        nonlocal off
        n = int.from_bytes(raw[off:off + 4], "big")
        off += 4 + n
        return raw[off - n:off]
    cipher, _kdf, _kdfopts = string(), string(), string()
    assert cipher == b"none"
    off += 4                                    # number of keys: 1
    string()                                    # the public key
    priv = string()
    off = 8                                     # two check words
    raw = priv
    ktype, pub, sk, comment = string(), string(), string(), string()
    assert ktype == b"ssh-ed25519"
    return bytes([17]) + b"".join(agent_string(x) for x in (ktype, pub, sk, comment))


# A raw agent client in perl (Debian's minbase has perl-base, not ssh-add
# nor python3): one connection; each line of the file in $ARGV[0] is "NAME
# HEX", a request message; it prints "NAME HEX" of the reply message, or
# "NAME closed" when the relay ends the connection.
AGENT_RAW_PL = r"""
use IO::Socket::UNIX;
my $s = IO::Socket::UNIX->new(Peer => $ENV{SSH_AUTH_SOCK}) or die "connect: $!";
open(my $in, '<', $ARGV[0]) or die "$ARGV[0]: $!";
while (my $line = <$in>) {
  chomp $line;
  my ($name, $hex) = split / /, $line;
  my $body = pack("H*", $hex);
  print $s pack("N", length $body), $body;
  my ($h, $reply);
  if (read($s, $h, 4) != 4) { print "$name closed\n"; last; }
  my $n = unpack("N", $h);
  read($s, $reply, $n) == $n or die "$name: short reply";
  print "$name ", unpack("H*", $reply), "\n";
}
"""

# The caller's ssh-add run in the step with its own loader and libraries
# (the image has none), every answer kept: NAME.out and NAME.rc.
HOSTILE_SH = r"""
A="/tools/ld.so --library-path /tools /tools/ssh-add"
export SSH_ASKPASS=/tools/askpass SSH_ASKPASS_REQUIRE=force
run() { name=$1; shift; "$@" > /results/$name.out 2>&1 < /dev/null; echo $? > /results/$name.rc; }
install -m 600 /tools/planted /tmp/planted
run list $A -l
run test-sign $A -T /tools/id_test.pub
run delete-all $A -D
run lock $A -x
run add $A /tmp/planted
run delete $A -d /tools/id_test.pub
run list-after $A -l
"""


def host_ssh_add_tools(dest):
    """ssh-add, the libraries ldd names and the loader, into `dest`."""
    import shutil
    dest.mkdir(parents=True, exist_ok=True)
    exe = shutil.which("ssh-add")
    shutil.copy(exe, dest / "ssh-add")
    ldd = subprocess.run(["ldd", exe], capture_output=True, text=True, check=True).stdout
    for line in ldd.splitlines():
        parts = line.split()
        if "=>" in parts and len(parts) >= 3 and parts[2].startswith("/"):
            shutil.copy(parts[2], dest / parts[0])
        elif parts and parts[0].startswith("/") and "ld-linux" in parts[0]:
            shutil.copy(parts[0], dest / "ld.so")
    assert (dest / "ld.so").exists(), ldd


def test_ssh_agent_is_read_only(sstore, base_image, tmp_path, agent):
    """Issue 38, hole 2: a step behind RUN --mount=type=ssh could empty the
    user's agent (REMOVE_ALL_IDENTITIES), lock it with the recipe's password
    (LOCK) or plant a key (ADD_IDENTITY).  The relay is now BuildKit's
    read-only agent (moby/buildkit
    session/sshforward/sshprovider/agentprovider.go: readOnlyAgent over
    golang.org/x/crypto ssh/agent's ServeAgent): listing and signing pass,
    everything else is answered SSH_AGENT_FAILURE by the relay, and the
    agent afterwards still holds its key, unlocked."""
    sock, blob_hex, comment = agent
    blob = bytes.fromhex(blob_hex)
    ctx = tmp_path / "ctx"
    tools = ctx / "tools"
    host_ssh_add_tools(tools)
    write(tools / "askpass", "#!/bin/sh\necho recipe-password\n", mode=0o755)
    import shutil
    shutil.copy(tmp_path / "id_test.pub", tools / "id_test.pub")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "planted-by-recipe",
                    "-f", str(tools / "planted")], check=True)
    add = ed25519_add_identity(tools / "planted")
    data = b"imgbuild relay signing check " + secrets.token_hex(8).encode()
    sign = bytes([13]) + agent_string(blob) + agent_string(data) + (0).to_bytes(4, "big")
    # (in an order where each would succeed on an unfiltered agent: the
    # adds before the lock, the unlock after it)
    requests = [
        ("add", add),                                                   # ADD_IDENTITY
        ("add-constrained", bytes([25]) + add[1:] + bytes([2])),        # ADD_ID_CONSTRAINED, confirm
        ("remove", bytes([18]) + agent_string(blob)),                   # REMOVE_IDENTITY
        ("remove-all", bytes([19])),                                    # REMOVE_ALL_IDENTITIES
        ("lock", bytes([22]) + agent_string("recipe-password")),        # LOCK
        ("unlock", bytes([23]) + agent_string("recipe-password")),      # UNLOCK
        ("query", bytes([27]) + agent_string("query")),                 # EXTENSION
        ("list", bytes([11])),                                          # REQUEST_IDENTITIES
        ("sign", sign),                                                 # SIGN_REQUEST
    ]
    write(ctx / "requests", "".join(f"{n} {b.hex()}\n" for n, b in requests))
    write(ctx / "agent-raw.pl", AGENT_RAW_PL)
    write(ctx / "hostile.sh", HOSTILE_SH)
    out = tmp_path / "out"
    recipe = write(ctx / "r.recipe", f"""
FROM {base_image}
COPY tools /tools
RUN mkdir -m 1777 /results
RUN --mount=type=ssh --mount=type=bind,source=agent-raw.pl,target=/raw.pl \\
    --mount=type=bind,source=requests,target=/requests perl /raw.pl /requests > /results/raw
RUN --mount=type=ssh --mount=type=bind,source=hostile.sh,target=/hostile.sh sh /hostile.sh
OUTPUT type=local,dest={out},src=/results
""")
    r = imgbuild("build", recipe, "--ssh", "default", store=sstore, cwd=ctx,
                 env={"SSH_AUTH_SOCK": str(sock)})
    assert r.rc == 0, r

    # what the step saw: SSH_AGENT_FAILURE for each write, on a connection
    # that goes on; then the list and the signature, as the agent gives them
    raw = dict(l.split(" ", 1) for l in (out / "raw").read_text().splitlines())
    refused = ["add", "add-constrained", "remove", "remove-all", "lock", "unlock", "query"]
    assert {n: raw.get(n) for n in refused} == {n: "%02x" % SSH_AGENT_FAILURE for n in refused}, raw
    want_list = bytes([12]) + (1).to_bytes(4, "big") + agent_string(blob) + agent_string(comment)
    assert raw["list"] == want_list.hex(), raw
    # ed25519 signatures are deterministic: the agent, asked directly now
    # (so it is unlocked), signs the same bytes the same way
    direct = agent_call(sock, sign)
    assert direct[0] == 14, direct                                     # SIGN_RESPONSE
    assert raw["sign"] == direct.hex(), (raw["sign"], direct.hex())

    # what ssh-add in the step said
    res = {p.name: p.read_text() for p in out.iterdir()}
    fingerprint = subprocess.run(["ssh-keygen", "-lf", str(tmp_path / "id_test.pub")],
                                 capture_output=True, text=True, check=True).stdout
    assert (res["list.rc"].strip(), res["list.out"]) == ("0", fingerprint), res
    assert (res["test-sign.rc"].strip(), res["test-sign.out"]) == ("0", ""), res  # ssh-add -T: sign and verify
    assert res["delete-all.rc"].strip() == "1", res
    assert "Failed to remove all identities." in res["delete-all.out"], res
    for name in ("lock", "add", "delete"):
        assert res[f"{name}.rc"].strip() == "1", (name, res)
        assert "agent refused operation" in res[f"{name}.out"], (name, res)
    assert (res["list-after.rc"].strip(), res["list-after.out"]) == ("0", fingerprint), res

    # the user's agent afterwards: its one key, no planted one, not locked
    # (a locked agent lists nothing)
    env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
    listed = subprocess.run(["ssh-add", "-l"], capture_output=True, text=True, env=env)
    assert (listed.returncode, listed.stdout) == (0, fingerprint), listed
    assert agent_call(sock, bytes([11])) == want_list
