// Decode a crdt-state document with stock Yjs, then edit a list in it, for interop tests.
//
// Usage: node ydecode.mjs < request.json
//
// Reads one JSON object on stdin:
//   {"update": <base64 Yjs update>, "key": k, "push": [...], "mapIndex": i, "mapKey": s, "mapValue": v}
// Applies the update to a fresh Y.Doc and prints one JSON line:
//   {"state": <the root Y.Map "state" as toJSON()>,
//    "layout": {"array": bool, "length": n, "maps": n, "arrays": n, "items": n},
//    "update": <base64 update holding the edits below>}
// where `layout` describes the Y.Array at state[k] (how many of its elements are Y.Map and
// Y.Array, and how many Yjs items hold its content), and the edits are: `push` appended
// to that Y.Array, and mapKey=mapValue set in the Y.Map element at index mapIndex.
// BigInts (Yjs' int64 values) are written as {"$bigint": "<decimal>"}.

import * as Y from 'yjs'

const chunks = []
for await (const chunk of process.stdin) chunks.push(chunk)
const request = JSON.parse(Buffer.concat(chunks).toString('utf8'))

const doc = new Y.Doc()
Y.applyUpdate(doc, Buffer.from(request.update, 'base64'))
const state = doc.getMap('state')
const list = state.get(request.key)

let items = 0
for (let item = list._start; item !== null; item = item.right) items++
const elements = list.toArray()
const layout = {
  array: list instanceof Y.Array,
  length: list.length,
  maps: elements.filter((e) => e instanceof Y.Map).length,
  arrays: elements.filter((e) => e instanceof Y.Array).length,
  items
}
const json = state.toJSON()

const before = Y.encodeStateVector(doc)
doc.transact(() => {
  list.push(request.push)
  list.get(request.mapIndex).set(request.mapKey, request.mapValue)
})
const update = Buffer.from(Y.encodeStateAsUpdate(doc, before)).toString('base64')

const replacer = (_key, value) =>
  typeof value === 'bigint' ? { $bigint: value.toString() } : value
process.stdout.write(JSON.stringify({ state: json, layout, update }, replacer) + '\n')
