// A real MCP server over WebSocket for test_mcp.py: the SDK's McpServer (mcp_tools.mjs: `echo`, a
// read, and `write_note`, a write) behind a server transport over the
// `ws` package, over TLS on the test host, speaking MCP's "mcp" subprotocol as the SDK's
// WebSocketClientTransport does. The SDK ships that client transport but no server one; this file's
// transport only moves JSON-RPC messages between the socket and the server. Every message that
// reaches it and every tool that runs is appended to RECEIVED ({"ws": MESSAGE}, {"ran": NAME}).
// usage: node mcp_ws_server.mjs ADDRESS PORT CERT KEY RECEIVED
import fs from 'node:fs';
import https from 'node:https';
import { JSONRPCMessageSchema } from '@modelcontextprotocol/sdk/types.js';
import { WebSocketServer } from 'ws';
import { testServer } from './mcp_tools.mjs';

const [address, port, cert, key, received] = process.argv.slice(2);
const note = (o) => fs.appendFileSync(received, JSON.stringify(o) + '\n');

const server = () => testServer('sluice-test-ws-server', note);

// The SDK's Transport interface (start, send, close; onmessage, onclose, onerror) over one socket.
class WebSocketServerTransport {
  constructor(socket) { this.socket = socket; }
  async start() {
    this.socket.on('message', (data) => {
      const text = data.toString();
      note({ ws: text });
      let message;
      try {
        message = JSONRPCMessageSchema.parse(JSON.parse(text));
      } catch (e) {
        this.onerror?.(e);
        return;
      }
      this.onmessage?.(message);
    });
    this.socket.on('close', () => this.onclose?.());
    this.socket.on('error', (e) => this.onerror?.(e));
  }
  async send(message) { this.socket.send(JSON.stringify(message)); }
  async close() { this.socket.close(); }
}

const web = https.createServer({ cert: fs.readFileSync(cert), key: fs.readFileSync(key) });
const wss = new WebSocketServer({
  server: web,
  path: '/ws',
  handleProtocols: (protocols) => (protocols.has('mcp') ? 'mcp' : false),
  perMessageDeflate: process.env.MCP_WS_DEFLATE === '1',
});
wss.on('connection', async (socket) => {
  await server().connect(new WebSocketServerTransport(socket));
});
web.listen(Number(port), address, () => console.log('ready'));
