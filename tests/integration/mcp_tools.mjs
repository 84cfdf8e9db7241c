// The test MCP server's tools, for mcp_server.mjs (Streamable HTTP) and mcp_ws_server.mjs
// (WebSocket): the SDK's McpServer with `echo` (a read) and `write_note` (a write); each tool that
// runs is noted ({"ran": NAME, "text": TEXT}) so that a test sees what sluice let through.
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';

export function testServer(name, note) {
  const s = new McpServer({ name, version: '1.0.0' });
  s.registerTool('echo', { description: 'Echoes its text (reads nothing, writes nothing)', inputSchema: { text: z.string() } },
    async ({ text }) => {
      note({ ran: 'echo', text });
      return { content: [{ type: 'text', text: 'echo: ' + text }] };
    });
  s.registerTool('write_note', { description: 'Writes a note (a write)', inputSchema: { text: z.string() } },
    async ({ text }) => {
      note({ ran: 'write_note', text });
      return { content: [{ type: 'text', text: 'written: ' + text }] };
    });
  return s;
}
