"""The recipe corpus (tests/recipe-corpus/) against a second, independent
Dockerfile parser: dockerfile-ast (npm, MIT; the parser of the Dockerfile
language server) and, for errors, its validator dockerfile-utils (same
author).  The .expected files are written by the same people as
builder/recipe.c; this confirms each of them with an implementation that
shares nothing with ours.  tests/lib/dockerfile-ast/dump.js prints what
dockerfile-ast makes of every case (its API only); the fields both sides can
express are compared here with the .expected file (the parser itself is held
to the same files by test_recipe_corpus in `make unit`).

Compared, for a recipe that parses (KEYWORD@LINE names an instruction):
  escape     the escape directive (getEscapeCharacter())
  sequence   the instructions in order, keyword (upper case) and the
             1-based line of the keyword, global ARGs and stages included;
             where the sequences differ, the instructions both have are
             still compared
  stage      each FROM's stage name (`AS name`; names are case-insensitive,
             ours are stored lower case, so getBuildStage() is lowered)
  text       our `text` against getArgumentsContent() (the arguments after
             the flags, continuations joined; none is ""), except:
             FROM: getImage() (the stage name is its own field);
             HEALTHCHECK CMD: the text after getSubcommand();
             COPY/ADD with heredocs: dockerfile-ast's instruction takes in
             the bodies, ours keeps them apart, so the document from its
             first argument to its last one before the first body;
             RUN <<EOF alone (`script`): our text is the body, compared as
             the heredoc's content
  flags      our `flag` lines against getFlags() as `--name=value`; a
             boolean written alone (`--link`) is ours `--link=true`
  json       exec / JSON form: getOpeningBracket() and getClosingBracket()
  args       JSON form: the elements, against getJSONStrings(); otherwise
             the words as written, against getArguments()' ranges (the same
             COPY/ADD heredoc rule as text)
  kv         ARG/ENV/LABEL key, value and raw against getProperties():
             getName(), getValue(), getUnescapedValue()
  heredoc    RUN/COPY/ADD: the names, the line each body starts on and the
             body up to the delimiter line, as written (getContentRange());
             `<<-` bodies lose leading tabs in ours, as the reference says,
             and are compared with dockerfile-ast's lines' leading tabs
             removed
  trigger    ONBUILD: getTriggerWord() and getTriggerInstruction(), with the
             same fields
  validator  dockerfile-utils' validate() reports no error (warnings are
             style advice: casing, MAINTAINER deprecated, ...)
For a recipe that must fail: validate() reports an error on the line ours
does (the messages are not compared).

Every disagreement is either fixed (the .expected file or the parser) or in
KNOWN below, with the reason; the test fails on a disagreement not in KNOWN
and on an entry of KNOWN that no longer disagrees in exactly that way.  The
npm tree is installed by tests/lib/dockerfile-ast.sh (tests/run-e2e.sh
installs it into $IMGBUILD_TEST_CACHE before the suite: no network at test
time)."""
import itertools
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT

CORPUS = ROOT / "tests/recipe-corpus"
CASES = sorted(p.name[:-len(".Dockerfile")] for p in CORPUS.glob("*.Dockerfile"))

# (case, field) -> (ours, dockerfile-ast's, reason).  `field` is as the
# comparison names it ("KEYWORD@LINE what"); ours and theirs are the two
# values exactly, so an entry states what disagrees and stops matching when
# either side changes.
_NO_RUN_FLAG_CHECK = "dockerfile-utils does not check RUN's flags (it knows ADD/COPY/FROM/HEALTHCHECK flags only)"
_INDENTED_COMMENT = "dockerfile-ast's getArgumentsContent() keeps an indented comment line inside a continuation (its getArguments() drops it); BuildKit drops comment lines after leading whitespace (isComment trims it)"
_JSON_SPACES = 'dockerfile-ast drops spaces and tabs inside JSON strings (its JSON scanner skips them unquoted or not)'
_QUOTED_COPY_WORDS = 'ours: a documented extension (docs/recipe.md: quoting a path in the plain form also works); BuildKit splits shell-form COPY/ADD on whitespace alone (parseMaybeJSONToList), as dockerfile-ast does'
_UNKNOWN_DIRECTIVE = 'dockerfile-ast takes every leading `# name=value` as a directive; the reference (and BuildKit) treat an unknown directive as a comment that ends the directives, so `# escape=`` after it is a comment and \\ still continues lines'
_DQ_DOLLAR = 'dockerfile-ast\'s Property.getValue() keeps the escape before $ inside double quotes; BuildKit\'s shell lexer (and POSIX sh) removes it (\\", \\$ and \\\\ are escapes there)'
_HEALTHCHECK_JSON = 'dockerfile-ast has no exec form for HEALTHCHECK CMD (Healthcheck is not a JSONInstruction)'
_BODY_CONTINUATION = 'dockerfile-ast applies line continuations inside a heredoc body (a body line ending in \\ swallows the delimiter line); BuildKit reads bodies line by line as written'
_NO_HEREDOC_DEST_CHECK = "dockerfile-utils does not check heredocs (a heredoc as COPY's destination)"
_HEREDOC_FD = "dockerfile-ast does not know the file-descriptor prefix of a heredoc (BuildKit's [0-9]*<<), so the body lines become instructions and the body is not a heredoc"
_HEREDOC_INNER_QUOTES = 'dockerfile-ast removes only quotes around the whole delimiter; BuildKit\'s shell lexer removes quotes anywhere in it (E"O"F is EOF), so dockerfile-ast never finds the end'
_NO_UNTERMINATED_CHECK = 'dockerfile-utils does not check for an unterminated heredoc'
_JSON_ESCAPES = 'dockerfile-ast decodes only \\" and \\\\ in JSON strings, not JSON\'s other escapes (\\t, \\uXXXX)'
_JSON_TRAILING = "dockerfile-ast ends the JSON form at the closing bracket and ignores what follows; BuildKit's parseJSON needs the whole text to be a JSON array (json.Unmarshal), else shell form"
_NO_JSON_TYPE_CHECK = 'dockerfile-utils does not check that JSON array elements are strings'
_NO_EMPTY_TRIGGER_CHECK = "dockerfile-utils reports no missing command for RUN (nor for `ONBUILD RUN`)"
_ONBUILD_EXPRESSION = 'BuildKit rebuilds ONBUILD\'s expression as its line + "\\n" + each body + the delimiter name (parseOnBuild), so a <<- delimiter line loses its tabs; dockerfile-ast gives the text as written'
_OUTPUT = "OUTPUT is imgbuild's own instruction (docs/recipe.md), unknown to dockerfile-ast and dockerfile-utils"
_FLAGS_END = "dockerfile-ast does not end the flags at a bare -- (BuildKit's extractBuilderFlags does)"
_QUOTED_FLAG = "dockerfile-ast does not remove quotes in flag values, and splits a quoted value at its space (BuildKit's extractBuilderFlags honours the quotes)"
_DUPLICATE_STAGE = "dockerfile-utils reports a stage name used twice as an error; BuildKit reports it as a warning (its DuplicateStageName check) and builds, which ours follows"
KNOWN = {
    ('bad-flag', 'validator'):
        ('error on line 3',
         'no error',
         _NO_RUN_FLAG_CHECK),
    ('continuation-comments-blank', 'RUN@5 text'):
        ('echo a   b   c',
         'echo a   b     # indented comment\n  c',
         _INDENTED_COMMENT),
    ('copy-json-spaces', 'COPY@2 args'):
        (['hom* dir', '/my dir/'],
         ['hom*dir', '/mydir/'],
         _JSON_SPACES),
    ('copy-json-spaces', 'ADD@3 args'):
        (['a.txt', 'b c.txt', '/dst/'],
         ['a.txt', 'bc.txt', '/dst/'],
         _JSON_SPACES),
    ('copy-json-spaces', 'COPY@4 args'):
        (['"quoted name"', '/dst/'],
         ['"quoted', 'name"', '/dst/'],
         _QUOTED_COPY_WORDS),
    ('from-duplicate-stage-name', 'validator line 4'):
        ('no error',
         'duplicate name base',
         _DUPLICATE_STAGE),
    ('from-duplicate-stage-name', 'validator line 6'):
        ('no error',
         'duplicate name base',
         _DUPLICATE_STAGE),
    ('directive-unknown-stops', 'validator line 5'):
        ('no error',
         'Unknown instruction: B',
         _UNKNOWN_DIRECTIVE),
    ('directive-unknown-stops', 'escape'):
        ('\\',
         '`',
         _UNKNOWN_DIRECTIVE),
    ('directive-unknown-stops', 'sequence'):
        (['FROM@3', 'RUN@4'],
         ['FROM@3', 'RUN@4', 'B@5'],
         _UNKNOWN_DIRECTIVE),
    ('directive-unknown-stops', 'RUN@4 text'):
        ('a b',
         'a \\',
         _UNKNOWN_DIRECTIVE),
    ('env-quotes', 'ENV@2 kv'):
        ([['A', 'single $x', "'single $x'"], ['B', 'dq "in" $y', '"dq \\"in\\" \\$y"'], ['C', 'a$b', 'a\\$b']],
         [['A', 'single $x', "'single $x'"], ['B', 'dq "in" \\$y', '"dq \\"in\\" \\$y"'], ['C', 'a$b', 'a\\$b']],
         _DQ_DOLLAR),
    ('healthcheck-cmd', 'HEALTHCHECK@4 args'):
        (['curl', '-f', 'http://localhost/'],
         None,
         _HEALTHCHECK_JSON),
    ('heredoc-body-not-parsed', 'COPY@2 heredoc 0 content'):
        ('# a comment, kept\nFROM not-a-stage\nRUN not \\\n\n',
         '# a comment, kept\nFROM not-a-stage\nRUN not \\\n\nEOF\n',
         _BODY_CONTINUATION),
    ('heredoc-destination', 'validator'):
        ('error on line 2',
         'no error',
         _NO_HEREDOC_DEST_CHECK),
    ('heredoc-fd-prefix', 'validator line 3'):
        ('no error',
         'Unknown instruction: X',
         _HEREDOC_FD),
    ('heredoc-fd-prefix', 'validator line 4'):
        ('no error',
         'Unknown instruction: EOF',
         _HEREDOC_FD),
    ('heredoc-fd-prefix', 'sequence'):
        (['FROM@1', 'RUN@2'],
         ['FROM@1', 'RUN@2', 'X@3', 'EOF@4'],
         _HEREDOC_FD),
    ('heredoc-fd-prefix', 'RUN@2 text'):
        ('3<<EOF cat /dev/fd/3\nx\nEOF',
         '3<<EOF cat /dev/fd/3',
         _HEREDOC_FD),
    ('heredoc-fd-prefix', 'RUN@2 heredoc names'):
        (['EOF'],
         [],
         _HEREDOC_FD),
    ('heredoc-quoted', 'RUN@8 heredoc names'):
        (['EOF'],
         ['E"O"F'],
         _HEREDOC_INNER_QUOTES),
    ('heredoc-quoted', 'RUN@8 heredoc 0 content'):
        ('$HOME\n',
         '$HOME\nEOF\n',
         _HEREDOC_INNER_QUOTES),
    ('heredoc-unterminated', 'validator'):
        ('error on line 2',
         'no error',
         _NO_UNTERMINATED_CHECK),
    ('json-escapes', 'CMD@2 args'):
        (['echo', '"quoted"', 'back\\slash', 'tab\t', 'é'],
         ['echo', '"quoted"', 'back\\slash', 'tab', '00e9'],
         _JSON_ESCAPES),
    ('json-invalid-is-shell', 'ENTRYPOINT@4 json'):
        (False,
         True,
         _JSON_TRAILING),
    ('json-not-strings', 'validator'):
        ('error on line 2',
         'no error',
         _NO_JSON_TYPE_CHECK),
    ('onbuild-empty-trigger', 'validator'):
        ('error on line 2',
         'no error',
         _NO_EMPTY_TRIGGER_CHECK),
    ('onbuild-heredoc', 'ONBUILD@5 text'):
        ('COPY <<-EOF /f\n\ttabbed\nEOF',
         'COPY <<-EOF /f\n\ttabbed\n\tEOF',
         _ONBUILD_EXPRESSION),
    ('output', 'validator line 2'):
        ('no error',
         'Unknown instruction: OUTPUT',
         _OUTPUT),
    ('output', 'validator line 3'):
        ('no error',
         'Unknown instruction: OUTPUT',
         _OUTPUT),
    ('output', 'validator line 4'):
        ('no error',
         'Unknown instruction: OUTPUT',
         _OUTPUT),
    ('output', 'OUTPUT@2 kv'):
        ([['type', 'local', 'local'], ['dest', 'dist', 'dist'], ['src', '/src/dist', '/src/dist']],
         [],
         _OUTPUT),
    ('output', 'OUTPUT@3 kv'):
        ([['type', 'image', 'image'], ['name', 'orion-client:cu9.0', 'orion-client:cu9.0']],
         [],
         _OUTPUT),
    ('output', 'OUTPUT@4 kv'):
        ([['type', 'oci', 'oci'], ['dest', 'out/oci', 'out/oci'], ['name', 'a,b', 'a,b']],
         [],
         _OUTPUT),
    ('run-mount-network-device', 'RUN@6 text'):
        ('--weird-command',
         '',
         _FLAGS_END),
    ('run-mount-network-device', 'RUN@6 flags'):
        (['--mount=type=tmpfs,target=/tmp'],
         ['--mount=type=tmpfs,target=/tmp', '--', '--weird-command'],
         _FLAGS_END),
    ('run-mount-network-device', 'RUN@7 text'):
        ('true',
         'b,target=/c" true',
         _QUOTED_FLAG),
    ('run-mount-network-device', 'RUN@7 flags'):
        (['--mount=type=bind,source=a b,target=/c'],
         ['--mount="type=bind,source=a'],
         _QUOTED_FLAG),
}


# -- the .expected format (tests/recipe-corpus/README.md) ---------------------

_ESC = {'"': '"', "\\": "\\", "n": "\n", "r": "\r", "t": "\t"}


def _tokens(s):
    """The words of one .expected line: "quoted" strings (C-like escapes),
    null, and bare words."""
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c in " \t":
            i += 1
        elif c == '"':
            i += 1
            b = bytearray()
            while s[i] != '"':
                if s[i] == "\\":
                    e = s[i + 1]
                    if e == "x":
                        b.append(int(s[i + 2:i + 4], 16))
                        i += 4
                        continue
                    b += _ESC[e].encode()
                    i += 2
                else:
                    b += s[i].encode()
                    i += 1
            out.append(b.decode())
            i += 1
        else:
            j = i
            while j < len(s) and s[j] not in " \t":
                j += 1
            w = s[i:j]
            out.append(None if w == "null" else w)
            i = j
    return out


def parse_expected(path):
    """{"error": MESSAGE} or {"escape": C, "instrs": [...]}, each instruction
    a dict with keyword, line, text, flags, json, args, kv, heredocs, script,
    trigger, and for FROM stage (index, name)."""
    lines = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        s = raw.strip()
        if s and not s.startswith("#"):
            lines.append(s)
    if lines and lines[0].startswith("error "):
        return {"error": lines[0][len("error "):]}
    exp = {"escape": "\\", "instrs": []}
    cur = None          # the instruction that field lines belong to
    stage = None
    want_trigger = None  # the ONBUILD whose trigger the next keyword line is
    for s in lines:
        m = re.fullmatch(r"([A-Z]+) (\d+)", s)
        if m:
            ins = {"keyword": m[1], "line": int(m[2]), "text": None, "flags": [], "json": False,
                   "args": None, "kv": [], "heredocs": [], "script": False, "trigger": None}
            if want_trigger is not None:
                want_trigger["trigger"] = ins
                want_trigger = None
            else:
                if ins["keyword"] == "FROM":
                    ins["stage"] = stage
                exp["instrs"].append(ins)
            cur = ins
            continue
        word, rest = (s.split(None, 1) + [""])[:2]
        t = _tokens(rest)
        if word == "escape":
            exp["escape"] = rest
        elif word == "stage":
            stage = (int(t[0]), t[1] if len(t) > 1 else None)
        elif word == "text":
            cur["text"] = t[0]
        elif word == "flag":
            cur["flags"].append(t[0])
        elif word == "json":
            cur["json"] = True
        elif word == "args":
            cur["args"] = t
        elif word == "kv":
            cur["kv"].append(tuple(t))
        elif word == "heredoc":
            attrs = dict(w.split("=", 1) for w in t[1:])
            cur["heredocs"].append({"name": t[0], "line": int(attrs["line"]),
                                    "chomp": attrs["chomp"] == "yes", "content": None})
        elif word == "content":
            cur["heredocs"][-1]["content"] = t[0]
        elif word == "script":
            cur["script"] = True
        elif word == "trigger":
            want_trigger = cur
        else:
            raise AssertionError(f"{path.name}: unknown line {s!r}")
    return exp


# -- dockerfile-ast -----------------------------------------------------------

@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    d = tmp_path_factory.mktemp("dockerfile-ast")
    p = subprocess.run(["bash", str(ROOT / "tests/lib/dockerfile-ast.sh"), "modules", str(d)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.fail(f"dockerfile-ast is not installed (tests/lib/dockerfile-ast.sh): {p.stderr[-2000:]}")
    mods = p.stdout.strip()
    files = [str(CORPUS / f"{c}.Dockerfile") for c in CASES]
    p = subprocess.run(["node", str(ROOT / "tests/lib/dockerfile-ast/dump.js"), *files],
                       capture_output=True, text=True, env=dict(os.environ, NODE_PATH=mods))
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout)
    return {Path(k).name[:-len(".Dockerfile")]: v for k, v in out.items()}


# -- the comparison -----------------------------------------------------------

def _strip_tabs(s):
    return "".join(ln.lstrip("\t") for ln in s.splitlines(keepends=True))


def _flags(ours, theirs):
    """dockerfile-ast's flags, where ours has `--name=true` for its
    `--name` written without a value (a boolean flag given alone is true:
    ours prints booleans as =true/=false) shown as ours."""
    return [o if "=" not in t and o == t + "=true" else t
            for t, o in itertools.zip_longest(theirs, ours[:len(theirs)])]


def _head(theirs):
    """dockerfile-ast's arguments of a COPY/ADD with heredocs: its range
    takes in the bodies and delimiter lines, which ours keeps apart (the
    heredocs); its arguments on the lines before the first body are the
    instruction line's.  The text is the document between the first and the
    last of them, as written."""
    hs = theirs.get("heredocs") or []
    first = min((h["content_line"] for h in hs if h["content_line"] is not None), default=None)
    if first is None:
        return theirs["text"], theirs["args_raw"]
    n = sum(1 for ln in theirs["arg_lines"] if ln < first)
    return theirs["head_text"][n], theirs["args_raw"][:n]


def compare_instr(ours, theirs, where, diff):
    def d(field, a, b):
        if a != b:
            diff(f"{where} {field}", a, b)
    kw = ours["keyword"]
    text = theirs["text"] if theirs["text"] is not None else ""
    args_raw = theirs["args_raw"]
    if kw in ("COPY", "ADD") and ours["heredocs"]:
        text, args_raw = _head(theirs)
    if kw == "FROM":
        # our text is the image; the stage name is its own field
        text = theirs["image"] if theirs["image"] is not None else ""
        if ours.get("stage") is not None:
            name = theirs.get("stage_name")
            d("stage", ours["stage"][1], name.lower() if name is not None else None)
    if kw == "HEALTHCHECK" and (theirs.get("subcommand") or "").upper() == "CMD":
        # our text is the command after CMD
        text = text[len(theirs["subcommand"]):].lstrip(" \t")
    if not ours["script"]:
        # (RUN <<EOF alone: our text is the body, compared as the heredoc's content)
        d("text", ours["text"], text)
    d("flags", ours["flags"], _flags(ours["flags"], theirs.get("flags", [])))
    if "json" in theirs:
        d("json", ours["json"], theirs["json"])
    if ours["args"] is not None:
        if ours["json"]:
            d("args", ours["args"], theirs.get("json_strings"))
        else:
            d("args", ours["args"], args_raw)
    if ours["kv"] or "properties" in theirs:
        d("kv", [list(k) for k in ours["kv"]],
          [[p["name"], p["value"], p["raw"]] for p in theirs.get("properties", [])])
    if ours["heredocs"] or theirs.get("heredocs"):
        d("heredoc names", [h["name"] for h in ours["heredocs"]],
          [h["name"] for h in theirs.get("heredocs", [])])
        for i, (h, t) in enumerate(zip(ours["heredocs"], theirs.get("heredocs", []))):
            d(f"heredoc {i} line", h["line"], t["content_line"])
            tc = t["content"] or ""
            d(f"heredoc {i} content", h["content"], _strip_tabs(tc) if h["chomp"] else tc)
    if kw == "ONBUILD":
        t = theirs.get("trigger")
        if ours["trigger"] is None or t is None:
            d("trigger", ours["trigger"] is not None, t is not None)
        else:
            tw = theirs["trigger_word"]
            d("trigger keyword", ours["trigger"]["keyword"], tw.upper() if tw is not None else None)
            compare_seq(ours["trigger"], t, f"{where} trigger", diff)
            compare_instr(ours["trigger"], t, f"{where} trigger", diff)


def _key(ins):
    return f"{ins['keyword']}@{ins['line']}"


def compare_seq(ours, theirs, where, diff):
    if _key(ours) != _key(theirs):
        diff(f"{where} instruction", _key(ours), _key(theirs))


def disagreements(case, exp, got):
    """{(case, field): (ours, theirs)}"""
    out = {}

    def diff(field, a, b):
        out[(case, field)] = (a, b)

    errors = [g for g in got["diagnostics"] if g["severity"] == 1]
    if "error" in exp:
        m = re.match(r"[^:]+:(\d+):", exp["error"])
        line = int(m[1]) if m else None
        if not any(g["line"] == line for g in errors):
            diff("validator", f"error on line {line}",
                 [f"{g['line']}: {g['message']}" for g in errors] or "no error")
        return out
    for g in errors:
        diff(f"validator line {g['line']}", "no error", g["message"])
    if exp["escape"] != got["escape"]:
        diff("escape", exp["escape"], got["escape"])
    ours, theirs = exp["instrs"], got["instructions"]
    if [_key(i) for i in ours] != [_key(i) for i in theirs]:
        diff("sequence", [_key(i) for i in ours], [_key(i) for i in theirs])
    # the instructions both sides have (all of them unless the sequences differ)
    by_key = {_key(t): t for t in theirs}
    for o in ours:
        if _key(o) in by_key:
            compare_instr(o, by_key[_key(o)], _key(o), diff)
    return out


@pytest.mark.parametrize("case", CASES)
def test_crosscheck(case, dumped):
    exp = parse_expected(CORPUS / f"{case}.expected")
    found = disagreements(case, exp, dumped[case])
    known = {k: v for k, v in KNOWN.items() if k[0] == case}
    unexplained = [f"{f}: ours {o!r}, dockerfile-ast {t!r}"
                   for (c, f), (o, t) in found.items() if (c, f) not in known]
    stale = []
    for (c, f), (o, t, _why) in known.items():
        if found.get((c, f)) != (o, t):
            now = found.get((c, f))
            stale.append(f"{f}: KNOWN says ours {o!r}, dockerfile-ast {t!r}; now "
                         + (f"ours {now[0]!r}, dockerfile-ast {now[1]!r}" if now else "they agree"))
    msg = []
    if unexplained:
        msg += ["disagreements not in KNOWN (fix the .expected file or the parser, or add"
                " an entry with the reason):"] + unexplained
    if stale:
        msg += ["KNOWN entries no longer true (remove or update them):"] + stale
    assert not msg, "\n".join(msg)


def test_known_names_cases():
    """Every KNOWN entry is about a case that exists and says why."""
    for (case, _field), (_o, _t, why) in KNOWN.items():
        assert case in CASES, case
        assert why.strip(), case


def test_corpus_size(dumped):
    assert len(CASES) >= 40 and set(dumped) == set(CASES)
