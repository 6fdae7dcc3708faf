// @ts-check
/**
 * The JSDoc types hold: TypeScript checks src/, support/ and test/ against
 * the declarations of pg, zod and Node.js 18 (the oldest Node.js supported),
 * so an API newer than Node.js 18 is caught here too.  And the declarations
 * in types/, committed so that `npm pack` needs no build, are exactly those
 * the sources generate (`npm run build`).
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";

const root = fileURLToPath(new URL("..", import.meta.url));
const tsc = fileURLToPath(new URL("../node_modules/typescript/bin/tsc", import.meta.url));
const skip = existsSync(tsc) ? false : "typescript is not installed (npm ci --omit=dev)";

describe("types", { timeout: 60000 }, () => {
  it("check with tsc", { skip }, () => {
    const run = spawnSync(process.execPath, [tsc, "-p", "jsconfig.json"], { cwd: root, encoding: "utf8" });
    assert.equal(run.status, 0, `${run.stdout}${run.stderr}`);
  });

  it("types/ holds the declarations the sources generate", { skip }, () => {
    const pkg = JSON.parse(readFileSync(path.join(root, "package.json"), "utf8"));
    const build = pkg.scripts.build.split(" ");
    assert.equal(build[0], "tsc");
    const outDir = build.indexOf("--outDir");
    assert.equal(build[outDir + 1], "types");
    const scratch = mkdtempSync(path.join(os.tmpdir(), "krizaka-types-"));
    try {
      const args = [...build.slice(1, outDir + 1), scratch, ...build.slice(outDir + 2)];
      const run = spawnSync(process.execPath, [tsc, ...args], { cwd: root, encoding: "utf8" });
      assert.equal(run.status, 0, `${run.stdout}${run.stderr}`);
      const generated = readdirSync(scratch).sort();
      assert.deepEqual(readdirSync(path.join(root, "types")).sort(), generated, "run npm run build");
      for (const name of generated) {
        assert.equal(
          readFileSync(path.join(root, "types", name), "utf8"),
          readFileSync(path.join(scratch, name), "utf8"),
          `types/${name} is not what the sources generate: run npm run build`,
        );
      }
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  });
});
