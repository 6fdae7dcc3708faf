#!/usr/bin/env node
// bench/http_latency.js: commit-to-receipt latency of webhooks, W9's
// counterpart of notify_latency.c.
//
// One connection produces count messages at a fixed rate, each in a
// transaction of its own (one statement in autocommit: its answer comes
// once the commit is durable), and notes the monotonic time the answer
// arrived.  Every message's payload carries its number ("seq"); the
// receiver (bench/http_receiver.js) notes when each body arrived on the
// same clock.  Whatever delivers (krizaka's worker, the relay, pg_net) must
// be running.  Once the receiver has them all, or 10 s after the last
// commit, the latencies are the differences, matched by seq.
//
//   node bench/http_latency.js conninfo append|pgnet topic|url count rate receiver path [csv]
//
// append: outbox.append(topic, …) of the benchmark's ~200-byte payload and
// its seq; pgnet: bench_pgnet.post(url, …) of the same (bench/pgnet.sql).
// Output: one line "n=… lost=… p50=… p90=… p99=… max=… (ms)"; with csv,
// one line per message: seq,commit_ms,receipt_ms,latency_ms.
'use strict';

const http = require('http');
const fs = require('fs');
const {Client} = require('pg');

const [conninfo, mode, target, countArg, rateArg, receiver, path, csv] = process.argv.slice(2);
if (!conninfo || !['append', 'pgnet'].includes(mode) || !target || !countArg || !rateArg || !receiver || !path) {
	process.stderr.write('usage: http_latency.js conninfo append|pgnet topic|url count rate receiver path [csv]\n');
	process.exit(2);
}
const count = Number(countArg);
const rate = Number(rateArg);
const nowMs = () => Number(process.hrtime.bigint()) / 1e6;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function get(url) {
	return new Promise((resolve, reject) => {
		http.get(url, (res) => {
			let s = '';
			res.setEncoding('utf8');
			res.on('data', (c) => { s += c; });
			res.on('end', () => resolve(s));
		}).on('error', reject);
	});
}

function parseConninfo(s) {
	const o = {};
	for (const kv of s.trim().split(/\s+/)) {
		const i = kv.indexOf('=');
		o[kv.slice(0, i)] = kv.slice(i + 1);
	}
	return {host: o.host, port: o.port ? Number(o.port) : undefined, user: o.user, database: o.dbname};
}

async function main() {
	const db = new Client(parseConninfo(conninfo));
	await db.connect();
	const payload = 'public.bench_payload($2::integer, $2::integer, 12.50, 3) || jsonb_build_object(\'seq\', $2::integer)';
	const statement = {
		name: 'produce',
		text: mode === 'append'
			? `SELECT outbox.append($1, 'evt.bench.latency.v1', ${payload})`
			: `SELECT bench_pgnet.post($1, ${payload})`,
		values: [target, 0],
	};
	const committed = new Float64Array(count).fill(-1);
	const start = nowMs();
	for (let i = 0; i < count; i++) {
		const due = start + i * 1000 / rate;
		const wait = due - nowMs();
		if (wait > 1) await sleep(wait);
		statement.values = [target, i];
		await db.query(statement);
		committed[i] = nowMs();
	}
	await db.end();

	const stats = JSON.parse(await get(`${receiver}/__wait?count=${count}&paths=${path}&timeout_ms=10000`));
	const received = new Float64Array(count).fill(-1);
	for (const line of (await get(`${receiver}/__log?path=${path}`)).split('\n')) {
		if (!line) continue;
		const [seq, t] = line.split(' ');
		// the first receipt of a message counts (a retry may bring it again)
		if (Number(seq) < count && received[Number(seq)] < 0) received[Number(seq)] = Number(t);
	}
	const lat = [];
	const lines = ['seq,commit_ms,receipt_ms,latency_ms'];
	for (let i = 0; i < count; i++) {
		if (received[i] < 0) continue;
		lat.push(received[i] - committed[i]);
		lines.push(`${i},${committed[i].toFixed(3)},${received[i].toFixed(3)},${(received[i] - committed[i]).toFixed(3)}`);
	}
	if (csv) fs.writeFileSync(csv, lines.join('\n') + '\n');
	if (lat.length === 0) {
		process.stderr.write(`http_latency: nothing received (receiver: ${JSON.stringify(stats)})\n`);
		process.exit(1);
	}
	lat.sort((a, b) => a - b);
	const n = lat.length;
	const at = (q) => lat[Math.min(Math.floor(n * q), n - 1)].toFixed(2);
	const seconds = (nowMs() - start) / 1000;
	process.stdout.write(`n=${n} lost=${count - n} p50=${at(0.5)} p90=${at(0.9)} p99=${at(0.99)} ` +
		`max=${lat[n - 1].toFixed(2)} (ms) seconds=${seconds.toFixed(1)}\n`);
	process.exit(n === count ? 0 : 1);
}

main().catch((e) => {
	process.stderr.write(`http_latency: ${e.message}\n`);
	process.exit(1);
});
