// A real MCP client for test_mcp.py: the SDK's Client over its StreamableHTTPClientTransport (or,
// for a wss: URL, its WebSocketClientTransport), through the proxy in HTTPS_PROXY (undici's
// ProxyAgent: Node's fetch reads no proxy variables), trusting the CA in NODE_EXTRA_CA_CERTS
// (sluice's). Lists the tools, then calls each tool named on
// the command line with {text: "hi"}; prints one JSON line: the tools and each call's result or
// error (code and message, as the agent would see them).
// usage: node mcp_client.mjs URL TOOL...
import fs from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { WebSocketClientTransport } from '@modelcontextprotocol/sdk/client/websocket.js';
import { ProxyAgent, WebSocket, fetch as undiciFetch, setGlobalDispatcher } from 'undici';

const [url, ...tools] = process.argv.slice(2);
const proxy = process.env.HTTPS_PROXY || process.env.https_proxy;
const caFile = process.env.NODE_EXTRA_CA_CERTS;
const dispatcher = new ProxyAgent({ uri: proxy, requestTls: caFile ? { ca: fs.readFileSync(caFile) } : undefined });
let transport;
if (url.startsWith('wss:')) {
  // The SDK's WebSocket transport uses the global WebSocket (Node 20 has none without a flag):
  // undici's, which opens its connection through the global dispatcher, the proxy.
  globalThis.WebSocket = WebSocket;
  setGlobalDispatcher(dispatcher);
  transport = new WebSocketClientTransport(new URL(url));
} else {
  transport = new StreamableHTTPClientTransport(new URL(url), {
    fetch: (u, init) => undiciFetch(u, { ...init, dispatcher }),
  });
}
const client = new Client({ name: 'sluice-test-client', version: '1.0.0' });
const out = { tools: [], calls: [] };
try {
  await client.connect(transport);
  out.tools = (await client.listTools()).tools.map((t) => t.name).sort();
  for (const name of tools) {
    try {
      const r = await client.callTool({ name, arguments: { text: 'hi' } });
      out.calls.push({ name, ok: !r.isError, text: r.content?.[0]?.text });
    } catch (e) {
      out.calls.push({ name, ok: false, code: e.code, message: e.message });
    }
  }
} catch (e) {
  out.error = String(e && e.stack || e);
}
console.log(JSON.stringify(out));
await client.close().catch(() => {});
process.exit(0);
