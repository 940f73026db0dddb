// Prints what dockerfile-ast (an independent Dockerfile parser) and
// dockerfile-utils' validator make of Dockerfiles, as one JSON object
// {FILE: parsed} on stdout, for tests/e2e/test_recipe_corpus_crosscheck.py.
// Only their API is used: nothing here parses the text itself (text is only
// cut out of the document at the ranges dockerfile-ast returns).
//   NODE_PATH=.../node_modules node dump.js FILE...
'use strict';
const fs = require('fs');
const { DockerfileParser } = require('dockerfile-ast');
// the same author's validator, built on dockerfile-ast (the language
// server's diagnostics), with its default settings
const { validate } = require('dockerfile-utils');
// dockerfile-ast's own dependency: the text under a range it returns
const { TextDocument } = require('vscode-languageserver-textdocument');
let doc = null;

function line(range) { return range.start.line + 1; }

function instruction(ins) {
  const o = {
    keyword: ins.getKeyword(),
    line: line(ins.getInstructionRange()),
    // the arguments after flags, continuations joined (null when none)
    text: ins.getArgumentsContent(),
    args: ins.getArguments().map(a => a.getValue()),
  };
  if (typeof ins.getFlags === 'function') {
    o.flags = ins.getFlags().map(f => '--' + f.getName() + (f.getValue() === null ? '' : '=' + f.getValue()));
  }
  if (typeof ins.getJSONStrings === 'function') {
    const open = ins.getOpeningBracket(), close = ins.getClosingBracket();
    o.json = open !== null && close !== null;
    o.json_strings = ins.getJSONStrings().map(s => s.getJSONValue());
  }
  if (typeof ins.getProperties === 'function') {
    o.properties = ins.getProperties().map(p => ({
      name: p.getName(), value: p.getValue(), raw: p.getUnescapedValue(),
      operator: p.getAssignmentOperator(),
    }));
  }
  // the arguments as written (getValue() removes escape characters)
  o.args_raw = ins.getArguments().map(a => doc.getText(a.getRange()));
  o.arg_lines = ins.getArguments().map(a => line(a.getRange()));
  // head_text[n]: the document from the first argument to the end of the
  // n-th (n = 0: ""), as written
  const as = ins.getArguments();
  o.head_text = [''].concat(as.map(a => doc.getText({ start: as[0].getRange().start, end: a.getRange().end })));
  // Instruction.getHeredocs() is public for RUN and COPY; ADD has the same
  // method (protected in the .d.ts, the same code), asked of it too.
  if (['RUN', 'COPY', 'ADD'].includes(o.keyword)) {
    o.heredocs = ins.getHeredocs().map(h => {
      const c = h.getContentRange();
      return {
        name: h.getName(), line: line(h.getNameRange()),
        content_line: c === null ? null : line(c),
        // the body up to the start of the delimiter line: its last line
        // ending included, as written
        content: c === null ? null
          : doc.getText({ start: c.start, end: { line: c.end.line + 1, character: 0 } }),
      };
    });
  }
  if (o.keyword === 'HEALTHCHECK') {
    const sub = ins.getSubcommand();
    o.subcommand = sub === null ? null : sub.getValue();
  }
  if (o.keyword === 'FROM') {
    o.stage_name = ins.getBuildStage();
    o.image = ins.getImage();
  }
  if (o.keyword === 'ONBUILD') {
    o.trigger_word = ins.getTriggerWord();
    const t = ins.getTriggerInstruction();
    o.trigger = t === null ? null : instruction(t);
  }
  return o;
}

const out = {};
for (const file of process.argv.slice(2)) {
  const content = fs.readFileSync(file, 'utf8');
  doc = TextDocument.create('file://' + file, 'dockerfile', 0, content);
  const df = DockerfileParser.parse(content);
  out[file] = {
    escape: df.getEscapeCharacter(),
    directives: df.getDirectives().map(d => ({ name: d.getName(), value: d.getValue(), line: line(d.getRange()) })),
    instructions: df.getInstructions().map(instruction),
    // severity: 1 error, 2 warning (the Language Server Protocol's numbers)
    diagnostics: validate(content).map(d => ({
      line: line(d.range), character: d.range.start.character + 1,
      severity: d.severity, code: d.code, message: d.message,
    })),
  };
}
process.stdout.write(JSON.stringify(out, null, 1) + '\n');
