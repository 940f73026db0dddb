// A local S3 server for the e2e tests: @20minutes/s3rver (a maintained
// fork of s3rver that checks AWS Signature Version 4; s3rver 3.x only
// checks the access key id), on 127.0.0.1, a port picked by the kernel.
//   node s3-server.js DATA_DIR PORT_FILE BUCKET...
// Credentials: the server's built-in account, key id S3RVER, secret S3RVER.
// The port is written to PORT_FILE once it listens.
'use strict';
const fs = require('fs');
const S3rver = require('@20minutes/s3rver');

const [dir, portFile, ...buckets] = process.argv.slice(2);
const server = new S3rver({
  address: '127.0.0.1',
  port: 0,
  silent: true,
  directory: dir,
  allowMismatchedSignatures: false,
  vhostBuckets: false,
  configureBuckets: buckets.map((name) => ({ name, configs: [] })),
});
server.run().then(
  (addr) => fs.writeFileSync(portFile + '.tmp', String(addr.port)) || fs.renameSync(portFile + '.tmp', portFile),
  (err) => {
    console.error(`s3-server: ${err}`);
    process.exit(1);
  },
);
