#!/usr/bin/env node
// bench/http_receiver.js: the webhook endpoint of the benchmark's W9.
//
// An HTTP/1.1 server on 127.0.0.1 that answers every POST with 200 and an
// empty body at once, keeping the connection open (keep-alive), and records
// for each request its path, the time its body had arrived (the monotonic
// clock, process.hrtime, in milliseconds: the clock of every process on the
// machine, so a producer in another process can subtract its own commit
// times), its webhook-id header and the "seq" of the payload when the body
// has one.  A path set to hang reads the request and never answers it, as a
// receiver that stopped responding does; its requests are counted apart and
// are no delivery.
//
//   node bench/http_receiver.js [--port N] [--hang /path]...
//
// Prints "ready port=N pid=P" once it listens (port 0, the default, takes a
// free one).  Control requests, all under /__ and never recorded:
//   GET  /__stats[?paths=/a,/b]   {"count", "first_ms", "last_ms", "mark_ms",
//                                 "hung", "paths": {path: count}}
//   GET  /__wait?count=N[&paths=/a,/b][&timeout_ms=T]
//                                 answers (the stats) once the paths together
//                                 received N requests, or after T ms (60000)
//   POST /__mark                  the time measurements start from (mark_ms)
//   POST /__reset                 forgets the requests, ends the hanging ones
//   POST /__hang?path=/p          /p hangs from now on; without path: none does
//   GET  /__log?path=/p           "seq recv_ms" per line, the requests of /p
//                                 that carried a seq
//   GET  /__webhooks?path=/p      "webhook-id webhook-timestamp" per line
//   GET  /__ping                  "ok"
// It stops on SIGTERM or SIGINT.
'use strict';

const http = require('http');

const args = process.argv.slice(2);
let port = 0;
const hang = new Set();
for (let i = 0; i < args.length; i++) {
	if (args[i] === '--port') port = Number(args[++i]);
	else if (args[i] === '--hang') hang.add(args[++i]);
	else {
		process.stderr.write(`http_receiver: unknown argument "${args[i]}"\n`);
		process.exit(2);
	}
}

const nowMs = () => Number(process.hrtime.bigint()) / 1e6;
const SEQ = /"seq": ?(\d+)/;

// the requests, one entry per index in each array
let paths = [];
let times = [];
let seqs = [];
let ids = [];
let stamps = [];
let markMs = null;
const hung = new Set();	// responses of hanging paths, never ended
const waiters = [];

function reset() {
	paths = [];
	times = [];
	seqs = [];
	ids = [];
	stamps = [];
	markMs = null;
	for (const res of hung) res.socket && res.socket.destroy();
	hung.clear();
	for (const w of waiters.splice(0)) {
		clearTimeout(w.timer);
		w.res.end(JSON.stringify(stats(w.only)) + '\n');
	}
}

function stats(only) {
	const perPath = {};
	let count = 0;
	let first = null;
	let last = null;
	for (let i = 0; i < paths.length; i++) {
		perPath[paths[i]] = (perPath[paths[i]] || 0) + 1;
		if (only && !only.has(paths[i])) continue;
		count++;
		if (first === null) first = times[i];
		last = times[i];
	}
	return {count, first_ms: first, last_ms: last, mark_ms: markMs, hung: hung.size, paths: perPath};
}

function countOf(only) {
	if (!only) return paths.length;
	let n = 0;
	for (const p of paths) if (only.has(p)) n++;
	return n;
}

// Answer the waiters whose count has been reached.
function wakeWaiters() {
	for (let i = waiters.length - 1; i >= 0; i--) {
		const w = waiters[i];
		if (countOf(w.only) >= w.count) {
			waiters.splice(i, 1);
			clearTimeout(w.timer);
			w.res.end(JSON.stringify(stats(w.only)) + '\n');
		}
	}
}
// Counting per request would make a waiter cost O(requests) each time: the
// waiters are checked every 5 ms instead.
setInterval(() => { if (waiters.length) wakeWaiters(); }, 5).unref();

function control(req, res, url) {
	const only = url.searchParams.get('paths') ? new Set(url.searchParams.get('paths').split(',')) : null;
	res.setHeader('Content-Type', 'text/plain');
	switch (url.pathname) {
		case '/__ping':
			return res.end('ok\n');
		case '/__stats':
			return res.end(JSON.stringify(stats(only)) + '\n');
		case '/__mark':
			markMs = nowMs();
			return res.end(JSON.stringify({mark_ms: markMs}) + '\n');
		case '/__reset':
			reset();
			return res.end('ok\n');
		case '/__hang': {
			const p = url.searchParams.get('path');
			if (p) hang.add(p); else hang.clear();
			return res.end(JSON.stringify([...hang]) + '\n');
		}
		case '/__wait': {
			const count = Number(url.searchParams.get('count') || 0);
			const timeout = Number(url.searchParams.get('timeout_ms') || 60000);
			if (countOf(only) >= count) return res.end(JSON.stringify(stats(only)) + '\n');
			const w = {count, only, res};
			w.timer = setTimeout(() => {
				waiters.splice(waiters.indexOf(w), 1);
				res.end(JSON.stringify(stats(only)) + '\n');
			}, timeout);
			waiters.push(w);
			return;
		}
		case '/__log': {
			const p = url.searchParams.get('path');
			const out = [];
			for (let i = 0; i < paths.length; i++)
				if ((!p || paths[i] === p) && seqs[i] >= 0) out.push(`${seqs[i]} ${times[i].toFixed(3)}`);
			return res.end(out.join('\n') + (out.length ? '\n' : ''));
		}
		case '/__webhooks': {
			const p = url.searchParams.get('path');
			const out = [];
			for (let i = 0; i < paths.length; i++)
				if (!p || paths[i] === p) out.push(`${ids[i]} ${stamps[i]}`);
			return res.end(out.join('\n') + (out.length ? '\n' : ''));
		}
		default:
			res.statusCode = 404;
			return res.end('no such control request\n');
	}
}

const server = http.createServer((req, res) => {
	if (req.url.startsWith('/__')) {
		req.resume();
		req.on('end', () => control(req, res, new URL(req.url, 'http://localhost')));
		return;
	}
	const chunks = [];
	req.on('data', (c) => chunks.push(c));
	req.on('end', () => {
		const t = nowMs();
		const path = req.url.split('?')[0];
		if (hang.has(path)) {
			// read, never answered: the connection stays open until the
			// client gives up or a reset ends it
			hung.add(res);
			res.on('close', () => hung.delete(res));
			return;
		}
		const body = chunks.length === 1 ? chunks[0].toString() : Buffer.concat(chunks).toString();
		const m = SEQ.exec(body);
		paths.push(path);
		times.push(t);
		seqs.push(m ? Number(m[1]) : -1);
		ids.push(req.headers['webhook-id'] || '-');
		stamps.push(req.headers['webhook-timestamp'] || '-');
		res.writeHead(200, {'Content-Length': '0'});
		res.end();
	});
});
// an endpoint behind a load balancer keeps idle connections about a minute
server.keepAliveTimeout = 65000;
server.headersTimeout = 66000;
server.requestTimeout = 0;
server.maxRequestsPerSocket = 0;

server.listen(port, '127.0.0.1', () => {
	process.stdout.write(`ready port=${server.address().port} pid=${process.pid}\n`);
});

const stop = () => {
	for (const res of hung) res.socket && res.socket.destroy();
	server.close();
	process.exit(0);
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
