#!/usr/bin/env node
// A small Node.js client of the attnserve gRPC services, loaded at run time from the
// contract in ../../protos (no generated code, no build step):
//
//   node client.js [--target HOST:PORT] translate TEXT...   one English line per Spanish text
//   node client.js [--target HOST:PORT] caption IMAGE...    one caption per image file
//   node client.js [--target HOST:PORT] score SOURCE TARGET...  each pair's mean log-probability
// translate also takes, before the command: --html (the texts are HTML: markup kept),
// --prefix TEXT (each translation starts with it), --suppress WORDS (never produced; repeatable),
// --term SOURCE=TARGET (a glossary entry: SOURCE found in a text is TARGET in its translation;
// repeatable).
//
// The target defaults to 127.0.0.1:50051. When ATTNSERVE_TOKEN is set, every call carries
// `authorization: Bearer TOKEN`, the metadata the server checks when it has tokens.
// Decoding options are left unset, so the server's defaults apply (greedy search), as with
// `attnserve translate` and `attnserve caption`.
// Exit status: 0 done; 1 the server refused or failed the call (`error: STATUS: details` on
// stderr); 2 a usage error or an image file that cannot be read.
'use strict';

const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTOS = path.resolve(__dirname, '..', '..', 'protos');
const DEFAULT_TARGET = '127.0.0.1:50051';
const TRANSLATE_DEADLINE_S = 60; // as the Python CLI's default deadlines
const CAPTION_DEADLINE_S = 120;
const MAX_RECEIVE_BYTES = 64 * 1024 * 1024; // alignments and attention maps can exceed 4 MB
const USAGE =
  'usage: node client.js [--target HOST:PORT] [--html] [--prefix TEXT] [--suppress WORDS]... ' +
  '[--term SOURCE=TARGET]... ' +
  'translate TEXT... | caption IMAGE... | score SOURCE TARGET...';

// The package attnserve.v1 as JavaScript constructors. keepCase keeps the proto's
// snake_case names (token_counts, not tokenCounts); longs as strings, since a uint64
// (Sampling.seed) does not always fit a JavaScript number; oneofs adds a field naming the
// member that is set (event: 'partial' | 'result' in the streams, unused here).
function loadContract() {
  const definition = protoLoader.loadSync(
    ['attnserve/v1/translation.proto', 'attnserve/v1/caption.proto'],
    { includeDirs: [PROTOS], keepCase: true, longs: String, enums: String, oneofs: true },
  );
  return grpc.loadPackageDefinition(definition).attnserve.v1;
}

// A --term's SOURCE=TARGET as a GlossaryEntry (the server checks the terms themselves).
function glossaryEntry(text) {
  const equals = text.indexOf('=');
  if (equals <= 0) throw new UsageError(`--term takes SOURCE=TARGET, not ${JSON.stringify(text)}`);
  return { source: text.slice(0, equals), target: text.slice(equals + 1) };
}

// the options that take the next argument as their value
const VALUED = ['--target', '--prefix', '--suppress', '--term'];

// --target HOST:PORT (or --target=HOST:PORT) before the command; the rest are its inputs.
function parseArgs(argv) {
  let target = DEFAULT_TARGET;
  const translation = { html: false, prefix: '', suppress: [], glossary: [] };
  const rest = [...argv];
  while (rest.length > 0 && rest[0].startsWith('--')) {
    const flag = rest.shift();
    if (VALUED.includes(flag) && rest.length === 0) throw new UsageError(`${flag} needs a value`);
    if (flag === '--target' && rest.length > 0) target = rest.shift();
    else if (flag.startsWith('--target=')) target = flag.slice('--target='.length);
    else if (flag === '--html') translation.html = true;
    else if (flag === '--prefix' && rest.length > 0) translation.prefix = rest.shift();
    else if (flag === '--suppress' && rest.length > 0) translation.suppress.push(rest.shift());
    else if (flag === '--term' && rest.length > 0) {
      translation.glossary.push(glossaryEntry(rest.shift()));
    }
    else if (flag === '--') break;
    else throw new UsageError(`unknown option ${flag}`);
  }
  const [command, ...inputs] = rest;
  if (!['translate', 'caption', 'score'].includes(command)) {
    throw new UsageError('translate, caption or score?');
  }
  if (inputs.length === 0) throw new UsageError(`${command} needs at least one input`);
  if (command === 'score' && inputs.length % 2 !== 0) {
    throw new UsageError('score takes SOURCE TARGET pairs');
  }
  return { target, command, inputs, translation };
}

// A wrong command line (showUsage) or an unreadable image file: exit status 2.
class UsageError extends Error {
  constructor(message, showUsage = true) {
    super(message);
    this.showUsage = showUsage;
  }
}

// The bearer token of ATTNSERVE_TOKEN, when set, as call metadata.
function callMetadata() {
  const metadata = new grpc.Metadata();
  const token = process.env.ATTNSERVE_TOKEN;
  if (token) metadata.set('authorization', `Bearer ${token}`);
  return metadata;
}

// One unary call as a promise: resolves with the response, rejects with the ServiceError
// (error.code a grpc.status number, error.details the server's message).
function unary(client, method, request, deadlineSeconds) {
  const deadline = new Date(Date.now() + deadlineSeconds * 1000);
  return new Promise((resolve, reject) => {
    client[method](request, callMetadata(), { deadline }, (error, response) =>
      error ? reject(error) : resolve(response));
  });
}

// The best hypothesis of each result (the first; the server returns one by default), one
// line each, in request order.
function printBest(results) {
  for (const result of results) console.log(result.hypotheses[0].text);
}

async function main(argv) {
  const { target, command, inputs, translation } = parseArgs(argv);
  const v1 = loadContract();
  const credentials = grpc.credentials.createInsecure(); // plaintext, as the default server
  const options = { 'grpc.max_receive_message_length': MAX_RECEIVE_BYTES };
  if (command === 'translate') {
    const client = new v1.TranslationService(target, credentials, options);
    try {
      // All texts in one request (the server takes up to 1,000); options not given are
      // left to the server.
      const request = {
        texts: inputs,
        options: { target_prefix: translation.prefix, suppress: translation.suppress },
        text_format: translation.html ? 'TEXT_FORMAT_HTML' : 'TEXT_FORMAT_PLAIN',
        glossary: translation.glossary,
      };
      const response = await unary(client, 'Translate', request, TRANSLATE_DEADLINE_S);
      printBest(response.translations);
    } finally {
      client.close();
    }
  } else if (command === 'score') {
    const client = new v1.TranslationService(target, credentials, options);
    try {
      const pairs = [];
      for (let i = 0; i < inputs.length; i += 2) {
        pairs.push({ source: inputs[i], target: inputs[i + 1] });
      }
      const response = await unary(client, 'Score', { pairs }, TRANSLATE_DEADLINE_S);
      for (const score of response.scores) console.log(score.mean_log_prob.toFixed(4));
    } finally {
      client.close();
    }
  } else {
    // Encoded images (PNG, JPEG or WebP) go as bytes, Buffers here; the server decodes them.
    const images = inputs.map((file) => {
      try {
        return fs.readFileSync(file);
      } catch (error) {
        throw new UsageError(`${file}: ${error.message}`, false);
      }
    });
    const client = new v1.CaptionService(target, credentials, options);
    try {
      // All images in one request (the server takes up to 64).
      const request = { images, options: {}, return_attention: false };
      const response = await unary(client, 'Caption', request, CAPTION_DEADLINE_S);
      printBest(response.captions);
    } finally {
      client.close();
    }
  }
}

main(process.argv.slice(2)).then(
  () => { process.exitCode = 0; },
  (error) => {
    if (error instanceof UsageError) {
      console.error(`error: ${error.message}${error.showUsage ? `\n${USAGE}` : ''}`);
      process.exitCode = 2;
    } else if (typeof error.code === 'number') {
      // A gRPC failure: the status by name (grpc.status maps numbers back to names).
      console.error(`error: ${grpc.status[error.code] || error.code}: ${error.details}`);
      process.exitCode = 1;
    } else {
      console.error(`error: ${error.stack || error}`);
      process.exitCode = 1;
    }
  },
);
