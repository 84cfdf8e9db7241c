// A real MCP server for test_mcp.py: the SDK's McpServer behind its StreamableHTTPServerTransport
// (stateless, JSON responses), over HTTPS on the test host. Two tools: `echo` (a read) and
// `write_note` (a write). Every request that reaches it is appended to RECEIVED (method and body),
// every tool that runs to RECEIVED too (as {"ran": NAME}), so that the test sees what sluice let
// through and what never arrived.
// usage: node mcp_server.mjs ADDRESS PORT CERT KEY RECEIVED
import fs from 'node:fs';
import https from 'node:https';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { testServer } from './mcp_tools.mjs';

const [address, port, cert, key, received] = process.argv.slice(2);
const note = (o) => fs.appendFileSync(received, JSON.stringify(o) + '\n');

const server = () => testServer('sluice-test-server', note);

https.createServer({ cert: fs.readFileSync(cert), key: fs.readFileSync(key) }, async (req, res) => {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const body = Buffer.concat(chunks).toString();
  note({ method: req.method, path: req.url, body });
  if (req.url !== '/mcp' || req.method !== 'POST') {
    res.writeHead(req.url === '/mcp' ? 405 : 404).end();
    return;
  }
  let parsed;
  try {
    parsed = JSON.parse(body);
  } catch {
    res.writeHead(400).end();
    return;
  }
  const s = server();
  const t = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
  res.on('close', () => { t.close(); s.close(); });
  await s.connect(t);
  await t.handleRequest(req, res, parsed);
}).listen(Number(port), address, () => console.log('ready'));
