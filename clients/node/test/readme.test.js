// @ts-check
/**
 * The README's example as written: its first js block runs against the
 * tables of the project README's Quick start (created by the Quick start's
 * own statements), appends, delivers through a worker that stops on
 * SIGTERM, and the receiving side applies its effect once.  Only fetch is
 * replaced: it hands the POSTed body to the example's own receive().
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";

import { createTestDatabase, waitFor } from "../support/db.js";

const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
const projectReadme = readFileSync(new URL("../../../README.md", import.meta.url), "utf8");
/* inside the package, so that the example imports the package by its name */
const program = fileURLToPath(new URL("../readme-example.tmp.mjs", import.meta.url));

/** @type {import("../support/db.js").TestDatabase} */
let db;

before(async () => {
  db = await createTestDatabase("readme");
});

after(async () => {
  await db?.drop();
  rmSync(program, { force: true });
});

/**
 * The fenced blocks of a language in a Markdown text.
 *
 * @param {string} text
 * @param {string} lang
 * @returns {string[]}
 */
function blocks(text, lang) {
  return [...text.matchAll(new RegExp("^```" + lang + "\\n([\\s\\S]*?)^```", "gm"))].map((m) => m[1]);
}

/**
 * The statements of the project README's Quick start that make its tables
 * coupon and credit and fill coupon.
 *
 * @returns {string[]}
 */
function quickStartTables() {
  const start = projectReadme.indexOf("\n## Quick start");
  assert.ok(start >= 0, "the project README has a Quick start");
  const end = projectReadme.indexOf("\n## ", start + 1);
  const sql = blocks(projectReadme.slice(start, end < 0 ? undefined : end), "sql").join("\n");
  const statements = [...sql.matchAll(/^(?:CREATE TABLE (?:coupon|credit)\b|INSERT INTO coupon\b)[^;]*;/gm)].map((m) => m[0]);
  assert.equal(statements.filter((s) => s.startsWith("CREATE TABLE")).length, 2, "the Quick start creates coupon and credit");
  return statements;
}

describe("the README's example", { timeout: 60000 }, () => {
  it("runs as written against the Quick start's tables", async () => {
    for (const statement of quickStartTables()) {
      await db.admin.query(statement);
    }
    const example = blocks(readme, "js")[0];
    assert.match(example, /UPDATE coupon .*"SPRING"/);
    writeFileSync(
      program,
      `globalThis.fetch = async (url, init) => {
        await receive(init.body);
        return new Response(null, { status: 204 });
      };
      ${example}`,
    );

    const child = spawn(process.execPath, [program], {
      env: { ...process.env, PGDATABASE: db.name },
      stdio: ["ignore", "inherit", "inherit"],
    });
    const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
    try {
      await waitFor(async () => {
        const { rows } = await db.admin.query("SELECT count(*)::int AS n FROM outbox.message WHERE delivered_at IS NOT NULL");
        return rows[0].n === 1;
      }, "the example's worker to deliver");
    } finally {
      child.kill("SIGTERM");
    }
    assert.deepEqual(await exited, { code: 0, signal: null }, "the worker stops on SIGTERM and the program ends");

    const { rows } = await db.admin.query(
      `SELECT (SELECT array_agg(code ORDER BY code) FROM coupon WHERE redeemed_at IS NOT NULL) AS redeemed,
              (SELECT json_agg(json_build_object('account_id', account_id, 'amount', amount)) FROM credit) AS credits,
              (SELECT json_agg(json_build_object('topic', topic, 'payload', payload, 'attempts', attempts))
                 FROM outbox.message) AS messages,
              (SELECT array_agg(consumer) FROM outbox.processed p JOIN outbox.message m ON m.id = p.message_id) AS markers`,
    );
    assert.deepEqual(rows[0], {
      redeemed: ["SPRING"],
      credits: [{ account_id: 7, amount: 10 }],
      messages: [{ topic: "credits", payload: { redemptionId: 41 }, attempts: 1 }],
      markers: ["credits"],
    });
  });
});
