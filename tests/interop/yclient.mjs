// A stock Yjs client for interop tests, driven by JSON lines on stdin.
//
// Usage: node yclient.mjs <ws-url> <room> [token]
//
// Connects an unmodified y-websocket 1.5.4 WebsocketProvider (with the `ws` package as
// WebSocketPolyfill, BroadcastChannel disabled so every byte goes through the server) and
// waits for the first sync step 2. Then it prints {"event":"synced"} and executes one
// command per stdin line, printing exactly one JSON line per command, in order:
//
//   {"op":"set","key":k,"value":v}          -> {"op":"set","ok":true}
//   {"op":"delete","key":k}                 -> {"op":"delete","ok":true}
//   {"op":"get"}                            -> {"op":"get","ok":true,"state":{...}}
//   {"op":"awareness","state":{...}}        -> {"op":"awareness","ok":true}  (local awareness state)
//   {"op":"peers"}                          -> {"op":"peers","ok":true,"peers":{id: state, ...}}
//                                              (the other clients' awareness states it holds)
//   {"op":"wait","key":k,"value":v,"timeout":ms}
//                                           -> {"op":"wait","ok":true} once state[k] deep-equals v
//                                              {"op":"wait","ok":false,"error":"timeout","value":cur}
//   {"op":"settype","key":k,"type":"text"|"xml","value":s}
//                                           -> {"op":"settype","ok":true}  (a Y.Text / Y.XmlFragment)
//   {"op":"sideload","update":b64}          -> {"op":"sideload","ok":true}  (a Yjs update applied
//                                              as if the server had sent it: not sent back; a
//                                              doc that also syncs through another provider)
//   {"op":"closes"}                         -> {"op":"closes","ok":true,"closes":[{code,reason}]}
//                                              (the close events the connection saw so far)
//   {"op":"quit"}                           -> {"op":"quit","ok":true}, then exits 0
//
// A bad line gives {"ok":false,"error":"..."}. If the first sync does not happen within
// SYNC_TIMEOUT_MS (env, default 10000) it prints {"event":"error",...} and exits 1.
// `state` is the root Y.Map named "state". Values are plain JSON (opaque in Yjs).

import readline from 'node:readline'
import { isDeepStrictEqual } from 'node:util'
import WebSocket from 'ws'
import * as Y from 'yjs'
import { WebsocketProvider } from 'y-websocket'

const [url, room, token] = process.argv.slice(2)
if (!url || !room) {
  process.stderr.write('usage: node yclient.mjs <ws-url> <room> [token]\n')
  process.exit(2)
}

const emit = (obj) => process.stdout.write(JSON.stringify(obj) + '\n')

const doc = new Y.Doc()
const state = doc.getMap('state')
const provider = new WebsocketProvider(url, room, doc, {
  WebSocketPolyfill: WebSocket,
  params: token ? { token } : {},
  disableBc: true
})

const closes = []
provider.on('connection-close', (event) => {
  if (event) closes.push({ code: event.code, reason: String(event.reason) })
})

const current = (key) => {
  const value = state.get(key)
  return value instanceof Y.AbstractType ? value.toJSON() : value
}

const waitFor = (key, value, timeoutMs) => new Promise((resolve) => {
  const check = () => isDeepStrictEqual(current(key), value)
  if (check()) return resolve(true)
  const onChange = () => {
    if (check()) finish(true)
  }
  const timer = setTimeout(() => finish(false), timeoutMs)
  function finish (ok) {
    clearTimeout(timer)
    state.unobserveDeep(onChange)
    resolve(ok)
  }
  state.observeDeep(onChange)
})

const shutdown = (code) => {
  provider.destroy()
  doc.destroy()
  // Let stdout drain before exiting.
  process.stdout.write('', () => process.exit(code))
}

const handle = async (cmd) => {
  switch (cmd.op) {
    case 'set':
      state.set(cmd.key, cmd.value)
      return { op: 'set', ok: true }
    case 'delete':
      state.delete(cmd.key)
      return { op: 'delete', ok: true }
    case 'get':
      return { op: 'get', ok: true, state: state.toJSON() }
    case 'awareness':
      provider.awareness.setLocalState(cmd.state)
      return { op: 'awareness', ok: true }
    case 'peers': {
      const peers = {}
      for (const [id, s] of provider.awareness.getStates()) {
        if (id !== doc.clientID) peers[id] = s
      }
      return { op: 'peers', ok: true, peers }
    }
    case 'wait': {
      const ok = await waitFor(cmd.key, cmd.value, cmd.timeout ?? 10000)
      return ok
        ? { op: 'wait', ok: true }
        : { op: 'wait', ok: false, error: 'timeout', value: current(cmd.key) ?? null }
    }
    case 'settype':
      state.set(cmd.key, cmd.type === 'xml' ? new Y.XmlFragment() : new Y.Text(cmd.value ?? ''))
      return { op: 'settype', ok: true }
    case 'sideload':
      Y.applyUpdate(doc, Buffer.from(cmd.update, 'base64'), provider)
      return { op: 'sideload', ok: true }
    case 'closes':
      return { op: 'closes', ok: true, closes }
    case 'quit':
      return { op: 'quit', ok: true }
    default:
      return { op: cmd.op ?? null, ok: false, error: 'unknown op' }
  }
}

const main = async () => {
  const syncTimeout = Number(process.env.SYNC_TIMEOUT_MS ?? 10000)
  const synced = await new Promise((resolve) => {
    if (provider.synced) return resolve(true)
    const timer = setTimeout(() => resolve(false), syncTimeout)
    provider.once('synced', () => {
      clearTimeout(timer)
      resolve(true)
    })
  })
  if (!synced) {
    emit({ event: 'error', error: 'sync timeout', url: provider.url })
    return shutdown(1)
  }
  emit({ event: 'synced', url: provider.url, clientID: doc.clientID })

  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity })
  for await (const line of lines) {
    if (!line.trim()) continue
    let cmd
    try {
      cmd = JSON.parse(line)
    } catch (err) {
      emit({ ok: false, error: 'bad json: ' + err.message })
      continue
    }
    emit(await handle(cmd))
    if (cmd.op === 'quit') return shutdown(0)
  }
  shutdown(0) // stdin closed
}

main().catch((err) => {
  emit({ event: 'error', error: String(err && err.stack ? err.stack : err) })
  shutdown(1)
})
