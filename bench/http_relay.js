#!/usr/bin/env node
// bench/http_relay.js: the webhook relay a team writes by hand over the
// outbox's pull API, the reference W9 measures HTTP routes against.
//
// One loop, one connection to the database, one keep-alive connection to
// the endpoint: claim up to batch messages of the topic (outbox.claim with
// their envelopes, outbox.envelope), POST each envelope in order with the
// Standard Webhooks headers (webhook-id = the message id, webhook-timestamp,
// webhook-signature = v1,<HMAC-SHA256 of id.timestamp.body, base64>), then
// complete the ones the endpoint accepted (2xx) with one
// outbox.complete_many; the others stay leased and come back when their
// lease ends.  When a claim finds nothing the loop polls again after
// poll_ms.
//
//   node bench/http_relay.js conninfo topic url count [batch] [poll_ms] [secret] [now|usr2]
//
// Prints "ready pid=P" once connected; with usr2 it then waits for SIGUSR2
// before its first claim (a measurement can start it on a full topic
// without counting the start of Node.js and of its connection).  Ends once
// it has delivered count messages and prints
// "delivered=N seconds=S rate=R posts=P failed=F".  pg comes from
// NODE_PATH (the benchmark installs examples/drivers' lockfile).
'use strict';

const http = require('http');
const crypto = require('crypto');
const {Client} = require('pg');

const [conninfo, topic, url, countArg, batchArg, pollArg, secretArg, startArg] = process.argv.slice(2);
if (!conninfo || !topic || !url || !countArg || !['now', 'usr2', undefined].includes(startArg)) {
	process.stderr.write('usage: http_relay.js conninfo topic url count [batch] [poll_ms] [secret] [now|usr2]\n');
	process.exit(2);
}
const count = Number(countArg);
const batch = Number(batchArg || 50);
const pollMs = Number(pollArg || 10);
const secret = secretArg && secretArg !== '-' ? secretArg : null;
const key = secret ? Buffer.from(secret.replace(/^whsec_/, ''), 'base64') : null;
const owner = `relay-${process.pid}`;
const target = new URL(url);
const agent = new http.Agent({keepAlive: true, maxSockets: 1});

function post(id, body) {
	const ts = Math.floor(Date.now() / 1000).toString();
	const headers = {
		'Content-Type': 'application/json',
		'Content-Length': Buffer.byteLength(body),
		'webhook-id': id,
		'webhook-timestamp': ts,
	};
	if (key)
		headers['webhook-signature'] =
			'v1,' + crypto.createHmac('sha256', key).update(`${id}.${ts}.${body}`).digest('base64');
	return new Promise((resolve) => {
		const req = http.request({
			agent, host: target.hostname, port: target.port, path: target.pathname + target.search,
			method: 'POST', headers, timeout: 10000,
		}, (res) => {
			res.resume();
			res.on('end', () => resolve(res.statusCode));
		});
		req.on('timeout', () => req.destroy(new Error('timeout')));
		req.on('error', () => resolve(0));
		req.end(body);
	});
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
	const db = new Client(conninfo.includes('=') ? parseConninfo(conninfo) : {connectionString: conninfo});
	await db.connect();
	const go = startArg === 'usr2' ? new Promise((r) => process.once('SIGUSR2', r)) : null;
	process.stdout.write(`ready pid=${process.pid}\n`);
	if (go) await go;
	const claim = {
		name: 'claim',
		text: 'SELECT m.id, outbox.envelope(m)::text AS body FROM outbox.claim($1, $2, $3) m',
		values: [owner, topic, batch],
	};
	let delivered = 0;
	let posts = 0;
	let failed = 0;
	const t0 = process.hrtime.bigint();
	while (delivered < count) {
		const {rows} = await db.query(claim);
		if (rows.length === 0) {
			await sleep(pollMs);
			continue;
		}
		const done = [];
		for (const m of rows) {
			const status = await post(m.id, m.body);
			posts++;
			if (status >= 200 && status < 300) done.push(m.id);
			else {
				// in order: the rest of the batch waits for its lease to end
				failed++;
				break;
			}
		}
		if (done.length) {
			await db.query({
				name: 'complete',
				text: 'SELECT outbox.complete_many($1::uuid[], $2)',
				values: [done, owner],
			});
			delivered += done.length;
		}
	}
	const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
	process.stdout.write(`delivered=${delivered} seconds=${seconds.toFixed(3)} ` +
		`rate=${(delivered / seconds).toFixed(0)} posts=${posts} failed=${failed}\n`);
	await db.end();
	agent.destroy();
}

// "host=/tmp/sock port=5432 user=postgres dbname=bench" as node-postgres
// takes it
function parseConninfo(s) {
	const o = {};
	for (const kv of s.trim().split(/\s+/)) {
		const i = kv.indexOf('=');
		o[kv.slice(0, i)] = kv.slice(i + 1);
	}
	return {host: o.host, port: o.port ? Number(o.port) : undefined, user: o.user, database: o.dbname};
}

main().catch((e) => {
	process.stderr.write(`http_relay: ${e.message}\n`);
	process.exit(1);
});
