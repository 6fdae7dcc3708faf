// @ts-check
/**
 * The JSDoc types hold: TypeScript checks src/, support/ and test/ against
 * the declarations of pg, zod and Node.js 18 (the oldest Node.js supported),
 * so an API newer than Node.js 18 is caught here too.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";

const root = fileURLToPath(new URL("..", import.meta.url));
const tsc = fileURLToPath(new URL("../node_modules/typescript/bin/tsc", import.meta.url));

describe("types", { timeout: 60000 }, () => {
  it("check with tsc", { skip: existsSync(tsc) ? false : "typescript is not installed (npm ci --omit=dev)" }, () => {
    const run = spawnSync(process.execPath, [tsc, "-p", "jsconfig.json"], { cwd: root, encoding: "utf8" });
    assert.equal(run.status, 0, `${run.stdout}${run.stderr}`);
  });
});
