'use strict'
/*
 * KafkaJS driven by tierlog's integration tests (tests/integration/kafkajs_driver.py).
 *
 * The first line of stdin is one JSON command; bytes travel as base64 strings, null stays
 * null. One-shot commands ("produce", "consume", "admin") print one JSON line, {"ok": true,
 * "result": ...} or {"ok": false, "error": {...}}, and exit. "group" stays a member of a
 * consumer group, printing one JSON line per event (assignment, record), until stdin
 * closes; it then leaves the group and prints {"event": "stopped"}.
 *
 * KafkaJS logs go to stderr (warnings and errors), so stdout carries JSON only.
 */

const readline = require('readline')
const { Kafka, logLevel, CompressionTypes, CompressionCodecs } = require('kafkajs')
const SnappyCodec = require('kafkajs-snappy')
const lz4 = require('lz4js')
const zstd = require('fzstd')

// KafkaJS has gzip built in; the other codecs are plugins, as its users add them. These
// are pure JavaScript (no native build): snappy (xerial and raw), LZ4 frames, and zstd for
// reading only (fzstd decompresses; no pure-JS zstd compressor is used).
CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec
CompressionCodecs[CompressionTypes.LZ4] = () => ({
  compress: async encoder => Buffer.from(lz4.compress(encoder.buffer)),
  decompress: async buffer => Buffer.from(lz4.decompress(buffer)),
})
CompressionCodecs[CompressionTypes.ZSTD] = () => ({
  compress: async () => {
    throw new Error('zstd compression is not available to these tests (reading only)')
  },
  decompress: async buffer => Buffer.from(zstd.decompress(buffer)),
})

const COMPRESSION = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4,
}

/* Resolves once the line is handed to the OS: a large answer to a pipe is written in
 * pieces, and exiting before the last one would cut it. */
function out(doc) {
  return new Promise(resolve => process.stdout.write(JSON.stringify(doc) + '\n', resolve))
}

function bytes(b64) {
  return b64 === null || b64 === undefined ? null : Buffer.from(b64, 'base64')
}

function b64(buffer) {
  return buffer === null || buffer === undefined ? null : Buffer.from(buffer).toString('base64')
}

function errorDoc(e) {
  const doc = { name: e.name, message: e.message, type: e.type || null, code: e.code ?? null }
  if (e.cause) doc.cause = errorDoc(e.cause)
  if (Array.isArray(e.errors)) doc.errors = e.errors.map(errorDoc)
  if (Array.isArray(e.partitions)) {
    doc.partitions = e.partitions.map(p => ({
      partition: p.partition,
      error: p.error ? errorDoc(p.error) : null,
    }))
  }
  return doc
}

function kafka(client) {
  const logCreator = () => ({ namespace, label, log }) =>
    process.stderr.write(`kafkajs ${label} ${namespace}: ${JSON.stringify(log)}\n`)
  const config = {
    clientId: client.clientId || 'tierlog-tests-kafkajs',
    brokers: client.brokers,
    connectionTimeout: 10000,
    requestTimeout: 30000,
    retry: { retries: 8, initialRetryTime: 100 },
    logLevel: logLevel.WARN,
    logCreator,
  }
  if (client.ssl) config.ssl = client.ssl // {ca: PEM, servername?} or true
  if (client.sasl) config.sasl = client.sasl // {mechanism, username, password}
  return new Kafka(config)
}

/*
 * KafkaJS takes headers as an object: a repeated name is an array of values, emitted
 * together at the name's first position, and integer-like names are ordered first by
 * JavaScript itself. A list of pairs those rules would reorder cannot be sent as given,
 * and is refused rather than sent differently.
 */
function headerObject(pairs) {
  const obj = {}
  for (const [name, value] of pairs) {
    const v = bytes(value)
    if (obj[name] === undefined) obj[name] = v
    else if (Array.isArray(obj[name])) obj[name].push(v)
    else obj[name] = [obj[name], v]
  }
  const order = headerPairs(obj).map(([name]) => name)
  if (JSON.stringify(order) !== JSON.stringify(pairs.map(([name]) => name))) {
    throw new Error(`KafkaJS cannot send these headers in this order: ${JSON.stringify(order)}`)
  }
  return obj
}

function headerPairs(obj) {
  const pairs = []
  for (const [name, value] of Object.entries(obj || {})) {
    for (const v of Array.isArray(value) ? value : [value]) pairs.push([name, v])
  }
  return pairs
}

async function produce(cmd) {
  const producer = kafka(cmd.client).producer({
    idempotent: !!cmd.idempotent,
    maxInFlightRequests: cmd.idempotent ? 1 : undefined,
    allowAutoTopicCreation: true,
  })
  await producer.connect()
  try {
    const offsets = []
    const perBatch = cmd.batchRecords || 50
    // One send per chunk: KafkaJS puts a send's records for a partition in one batch.
    for (let i = 0; i < cmd.records.length; i += perBatch) {
      const chunk = cmd.records.slice(i, i + perBatch)
      const messages = chunk.map(r => {
        const m = { partition: cmd.partition || 0, key: bytes(r.key), value: bytes(r.value) }
        if (r.headers && r.headers.length) m.headers = headerObject(r.headers)
        if (r.timestamp !== null && r.timestamp !== undefined) m.timestamp = String(r.timestamp)
        return m
      })
      const [meta] = await producer.send({
        topic: cmd.topic,
        messages,
        acks: -1,
        compression: COMPRESSION[cmd.compression || 'none'],
      })
      const base = Number(meta.baseOffset)
      chunk.forEach((_, j) => offsets.push(base + j))
    }
    return { offsets }
  } finally {
    await producer.disconnect()
  }
}

function recordDoc(message, partition) {
  return {
    partition,
    offset: Number(message.offset),
    key: b64(message.key),
    value: b64(message.value),
    headers: headerPairs(message.headers).map(([name, v]) => [name, b64(v)]),
    timestamp: Number(message.timestamp),
    // 0 CreateTime, 1 LogAppendTime (the batch attribute KafkaJS keeps per message)
    create_time: message.batchContext ? message.batchContext.timestampType === 0 : true,
  }
}

/* Read one partition from ``start`` up to its high watermark when the read began. */
async function consume(cmd) {
  const client = kafka(cmd.client)
  const partition = cmd.partition || 0
  const admin = client.admin()
  await admin.connect()
  let high
  try {
    const offsets = await admin.fetchTopicOffsets(cmd.topic)
    high = Number(offsets.find(p => p.partition === partition).high)
  } finally {
    await admin.disconnect()
  }
  const start = cmd.start || 0
  if (start >= high) return { records: [] }
  // KafkaJS reads only as a group member: a fresh group, nothing committed.
  const consumer = client.consumer({
    groupId: cmd.groupId,
    maxWaitTimeInMs: 200,
    sessionTimeout: 10000,
    heartbeatInterval: 1000,
  })
  const records = []
  let done
  const finished = new Promise((resolve, reject) => {
    done = { resolve, reject }
  })
  const timer = setTimeout(
    () => done.reject(new Error(`read ${records.length} records, end ${high}: timed out`)),
    cmd.timeoutMs || 60000
  )
  consumer.on(consumer.events.CRASH, e => {
    if (!e.payload.restart) done.reject(e.payload.error)
  })
  await consumer.connect()
  try {
    await consumer.subscribe({ topics: [cmd.topic], fromBeginning: true })
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition: p, message }) => {
        if (p !== partition || Number(message.offset) < start) return
        records.push(recordDoc(message, p))
        if (Number(message.offset) + 1 >= high) done.resolve()
      },
    })
    if (start > 0) consumer.seek({ topic: cmd.topic, partition, offset: String(start) })
    await finished
    return { records }
  } finally {
    clearTimeout(timer)
    await consumer.disconnect()
  }
}

/* Admin calls in order; each answers on its own, so one failure does not hide the rest. */
async function adminCalls(cmd) {
  const admin = kafka(cmd.client).admin()
  await admin.connect()
  const results = []
  try {
    for (const { call, args } of cmd.calls) {
      try {
        const result = await admin[call](...(args || []))
        results.push({ ok: true, result: result === undefined ? null : result })
      } catch (e) {
        results.push({ ok: false, error: errorDoc(e) })
      }
    }
  } finally {
    await admin.disconnect()
  }
  return { results }
}

/* A group member until stdin closes: prints its assignments and the records it reads. */
async function groupMember(cmd, lines) {
  const consumer = kafka(cmd.client).consumer({
    groupId: cmd.groupId,
    sessionTimeout: cmd.sessionTimeout || 10000,
    heartbeatInterval: cmd.heartbeatInterval || 500,
    maxWaitTimeInMs: 200,
    // How soon a new partition of the topic is seen (and the group rebalances onto it).
    metadataMaxAge: cmd.metadataMaxAge || 300000,
  })
  consumer.on(consumer.events.GROUP_JOIN, e => {
    const assignment = e.payload.memberAssignment || {}
    const partitions = (assignment[cmd.topic] || []).slice().sort((a, b) => a - b)
    out({ event: 'assigned', member_id: e.payload.memberId, partitions })
  })
  consumer.on(consumer.events.CRASH, e =>
    out({ event: 'crash', error: errorDoc(e.payload.error), restart: e.payload.restart })
  )
  await consumer.connect()
  await consumer.subscribe({ topics: [cmd.topic], fromBeginning: true })
  await consumer.run({
    autoCommitThreshold: 1, // commit after every record: the next owner resumes after it
    eachMessage: async ({ partition, message }) => {
      out({ event: 'record', partition, offset: Number(message.offset) })
    },
  })
  out({ event: 'running' })
  // stdin closing (or a "stop" line) ends the membership: disconnect sends LeaveGroup.
  for await (const line of lines) {
    if (line.trim() === 'stop') break
  }
  await consumer.disconnect()
  await out({ event: 'stopped' })
}

const COMMANDS = { produce, consume, admin: adminCalls }

async function main() {
  const lines = readline.createInterface({ input: process.stdin, terminal: false })
  const iterator = lines[Symbol.asyncIterator]()
  const first = await iterator.next()
  if (first.done) throw new Error('no command on stdin')
  const cmd = JSON.parse(first.value)
  if (cmd.op === 'group') {
    await groupMember(cmd, { [Symbol.asyncIterator]: () => iterator })
    return
  }
  const run = COMMANDS[cmd.op]
  if (!run) throw new Error(`unknown op ${cmd.op}`)
  let answer
  try {
    answer = { ok: true, result: await run(cmd) }
  } catch (e) {
    answer = { ok: false, error: errorDoc(e) }
  }
  await out(answer)
  lines.close()
}

main().then(
  () => process.exit(0),
  e => {
    process.stderr.write(`kafkajs_client: ${e.stack || e}\n`)
    process.exit(2)
  }
)
