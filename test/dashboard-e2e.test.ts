/**
 * End-to-end (docs/dashboard.md): `abacus serve` (the real CLI, a child process) on a sim:a100 config,
 * `/dashboard` opened in Debian's chromium driven by playwright-core, traffic driven over HTTP;
 * the page's lanes, groups, QoS table and rejections must appear and then update; a screenshot
 * (1280×800) is saved under the test's temp folder — and to `$ABACUS_DASHBOARD_SCREENSHOT` when
 * set (`npm run screenshot:dashboard` writes docs/img/dashboard.png this way). When the server
 * stops, the page must say it is gone. Skipped, saying why, only when chromium is missing.
 */
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startChildServer, writeConfig, type ChildServer } from './serve/child-serve.ts';

/** The page's DOM as the `page.evaluate` callbacks below use it (the test project has no DOM lib). */
interface Cell {
  readonly textContent: string | null;
}
interface Row {
  querySelectorAll(selector: 'td'): Iterable<Cell>;
}
declare const document: { body: { dataset: Record<string, string | undefined> }; querySelectorAll(selector: string): { length: number } & Iterable<unknown> };

const CHROMIUM = process.env['ABACUS_CHROMIUM'] ?? '/usr/bin/chromium';
const HAVE_CHROMIUM = existsSync(CHROMIUM);
const SKIP_REASON = `skipped: no chromium at ${CHROMIUM} (apt-get install chromium, or set ABACUS_CHROMIUM)`;

let tmp: string;
let server: ChildServer | undefined;
let browser: Browser | undefined;

beforeAll(async () => {
  tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-dashboard-'));
});
afterAll(async () => {
  await browser?.close();
  await server?.stop(2000);
  await fs.rm(tmp, { recursive: true, force: true });
});

interface ModelMeta {
  inputs: { name: string; datatype: string; shape: number[] }[];
}

/** A JSON infer body of zeros for `meta` at batch 1 (−1 dims → 1). */
function zerosRequest(meta: ModelMeta, parameters?: Record<string, number>): string {
  return JSON.stringify({
    inputs: meta.inputs.map((i) => {
      const shape = i.shape.map((d) => (d < 0 ? 1 : d));
      return { name: i.name, datatype: i.datatype, shape, data: new Array(shape.reduce((a, b) => a * b, 1)).fill(0) };
    }),
    ...(parameters === undefined ? {} : { parameters }),
  });
}

/** `clients` closed-loop clients per model for `ms` wall ms; returns the statuses seen. */
async function drive(url: string, bodies: Record<string, string>, ms: number, clients: number): Promise<Map<number, number>> {
  const statuses = new Map<number, number>();
  const until = Date.now() + ms;
  const loop = async (model: string, body: string): Promise<void> => {
    while (Date.now() < until) {
      const r = await fetch(`${url}/v2/models/${model}/infer`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      await r.arrayBuffer();
      statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
    }
  };
  await Promise.all(Object.entries(bodies).flatMap(([m, b]) => Array.from({ length: clients }, () => loop(m, b))));
  return statuses;
}

const dataset = (page: Page, key: string): Promise<string | undefined> => page.evaluate((k) => document.body.dataset[k], key);

describe('dashboard end to end (abacus serve + chromium)', () => {
  it.skipIf(!HAVE_CHROMIUM)(`shows lanes, groups and QoS live, and says when the server is gone${HAVE_CHROMIUM ? '' : ` (${SKIP_REASON})`}`, async () => {
    const config = await writeConfig(tmp, 'serve.yaml', [
      'device: sim:a100',
      'policy: { name: abacus, ways: 2, slackMs: 2, drop: true }',
      'services:',
      '  - name: resnet',
      '    model: resnet50-small',
      '    qosTargetMs: 40',
      '    batchSizes: [1]',
      '  - name: vgg',
      '    model: vgg19-small',
      '    qosTargetMs: 60',
      '    batchSizes: [1]',
    ]);
    // a predictor of 100 profiled groups: abacus groups queries with it all the same, and what the page shows does not depend on how accurate it is
    server = await startChildServer(config, { cacheDir: path.join(tmp, 'cache'), flags: ['--no-grpc', '--profile-samples', '100'], readyTimeoutMs: 300_000, stderrFile: path.join(tmp, 'serve.log') });
    const url = server.httpUrl;
    const metas: Record<string, string> = {};
    for (const m of ['resnet', 'vgg']) metas[m] = zerosRequest((await (await fetch(`${url}/v2/models/${m}`)).json()) as ModelMeta);

    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    const external: string[] = [];
    page.on('request', (r) => {
      if (!r.url().startsWith(url)) external.push(r.url());
    });
    const pageErrors: string[] = [];
    page.on('pageerror', (e) => pageErrors.push(e.message));
    await page.goto(`${url}/dashboard`);
    await page.waitForFunction(() => document.body.dataset['status'] === 'ready', undefined, { timeout: 30_000 });

    // first burst: groups appear in both lanes; the QoS panel gets numbers
    await drive(url, metas, 2500, 3);
    await page.waitForFunction(() => Number(document.body.dataset['groups'] ?? 0) > 10, undefined, { timeout: 30_000 });
    expect(await dataset(page, 'lanes')).toBe('resnet,vgg');
    expect(Number(await dataset(page, 'shownGroups'))).toBeGreaterThan(0);
    const rows = async (): Promise<string[][]> => page.$$eval('#qos-table tbody tr', (trs) => (trs as unknown as Row[]).map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent ?? '')));
    const first = await rows();
    expect(first.map((r) => r[0])).toEqual(['resnet', 'vgg']);
    expect(first.map((r) => r[1])).toEqual(['40', '60']);
    for (const r of first) expect(Number(r[2])).toBeGreaterThan(0); // p99 ms
    const groups1 = Number(await dataset(page, 'groups'));
    const updates1 = Number(await dataset(page, 'updates'));

    // second burst with hopeless per-request targets: more groups, and rejections with their reason
    const hopeless = zerosRequest((await (await fetch(`${url}/v2/models/resnet`)).json()) as ModelMeta, { qos_ms: 0.01 });
    const statuses = await drive(url, { ...metas, resnet: hopeless }, 1500, 2);
    expect(statuses.get(504) ?? 0).toBeGreaterThan(0);
    await page.waitForFunction((g) => Number(document.body.dataset['groups'] ?? 0) > g, groups1, { timeout: 30_000 });
    await page.waitForFunction(() => document.querySelectorAll('#rejections tbody tr').length > 0, undefined, { timeout: 30_000 });
    expect(Number(await dataset(page, 'updates'))).toBeGreaterThan(updates1);
    // the hopeless resnet requests are among the rejections, with their reason (vgg may have some of its own)
    await page.waitForFunction(() => [...(document.querySelectorAll('#rejections tbody tr') as unknown as Iterable<{ textContent: string | null }>)].some((tr) => /resnet\s*qos_violation/.test(tr.textContent ?? '')), undefined, { timeout: 30_000 });
    const rejections = await page.$$eval('#rejections tbody tr', (trs) => (trs as unknown as Row[]).map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent ?? '')));
    expect(rejections.some((r) => r[1] === 'resnet' && r[2] === 'qos_violation')).toBe(true);
    const second = await rows();
    expect(Number(second[0]![4])).toBeGreaterThan(0); // ended in the window
    expect(second[0]![3]).toMatch(/%$/);

    // a steady burst for the picture
    await drive(url, metas, 1500, 3);
    await page.waitForTimeout(400);
    const shot = path.join(tmp, 'dashboard.png');
    await page.screenshot({ path: shot });
    expect((await fs.stat(shot)).size).toBeGreaterThan(20_000);
    const copyTo = process.env['ABACUS_DASHBOARD_SCREENSHOT'];
    if (copyTo !== undefined && copyTo !== '') await fs.copyFile(shot, copyTo);

    // pause freezes the display; resume follows the stream again
    await page.click('#pause');
    expect(await dataset(page, 'paused')).toBe('true');
    await page.click('#pause');
    expect(await dataset(page, 'paused')).toBe('false');

    expect(external).toEqual([]);
    expect(pageErrors).toEqual([]);

    // the server goes: the page says so
    expect(await server.stop()).toBe(0);
    server = undefined;
    await page.waitForFunction(() => document.body.dataset['status'] === 'gone', undefined, { timeout: 30_000 });
    expect(await page.textContent('#banner')).toMatch(/server/i);
  }, 600_000);
});
