/**
 * The dashboard page (browser code; bundled with chart.js by esbuild into
 * `src/serve/dashboard/assets/dashboard.js`: `npm run build:dashboard`). It reads
 * `/dashboard/events` (Server-Sent Events, `src/serve/dashboard/protocol.ts`) and draws:
 * - a timeline of the last operator groups: one lane per service, a floating horizontal bar per
 *   segment (`[launch, launch + measured]`, chart.js `indexAxis: 'y'`), labelled with the query,
 *   its operators `[start, end)` and batch; each group outlined, its predicted end dashed;
 * - per service p99 latency against the QoS target, violation ratio and queue depth over time;
 * - the predictor's rolling error; a per-service table; the recent rejections with reasons.
 * Pause freezes the display (the stream is still read and kept, bounded); while paused the
 * history slider and Replay step through the kept groups. A banner says when the server is not
 * ready, shutting down, or gone (EventSource reconnects by itself).
 *
 * State for tests: `document.body.dataset` has `updates` (updates received), `groups` (groups
 * kept), `lanes` (the timeline's lanes, comma-separated) and `status`.
 */
import { BarController, BarElement, CategoryScale, Chart, Legend, LinearScale, LineController, LineElement, PointElement, Tooltip, type ChartDataset, type Plugin } from 'chart.js';
import type { DashboardBye, DashboardGroup, DashboardHello, DashboardRejection, DashboardService, DashboardUpdate } from '../src/serve/dashboard/protocol.ts';

Chart.register(BarController, BarElement, CategoryScale, LinearScale, LineController, LineElement, PointElement, Legend, Tooltip);

/** Tableau 10: distinct, colour-blind aware; service i (config order) always gets colour i. */
const PALETTE = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac'];
/** Groups kept in the page (for pause / replay). */
const KEEP_GROUPS = 2000;
/** Points kept per time series (at 4 updates/s: 75 s). */
const KEEP_POINTS = 300;
const KEEP_REJECTIONS = 40;

const $ = <T extends HTMLElement>(id: string): T => {
  const el = document.getElementById(id);
  if (el === null) throw new Error(`dashboard: no element #${id}`);
  return el as T;
};

interface State {
  services: readonly DashboardService[];
  colour: Map<string, string>;
  groups: DashboardGroup[];
  rejections: DashboardRejection[];
  series: { tS: number; p99: (number | null)[]; viol: (number | null)[]; queue: number[]; mape: number | null }[];
  last: DashboardUpdate | undefined;
  updates: number;
  paused: boolean;
  /** While paused: index (exclusive) of the last group shown. */
  cursor: number;
  replayTimer: number | undefined;
  windowMs: number;
  gone: boolean;
}

const state: State = { services: [], colour: new Map(), groups: [], rejections: [], series: [], last: undefined, updates: 0, paused: false, cursor: 0, replayTimer: undefined, windowMs: 10_000, gone: false };

const colourOf = (service: string): string => state.colour.get(service) ?? '#888';
const fmt = (x: number | null | undefined, digits = 1): string => (x === null || x === undefined || !Number.isFinite(x) ? '–' : x.toFixed(digits));

// ---------------------------------------------------------------- timeline

interface BarMeta {
  readonly group: DashboardGroup;
  /** The full label, then shorter ones for narrow bars. */
  readonly labels: readonly string[];
}

/** Draws the group outlines, predicted ends and bar labels on top of the bars. */
const timelineOverlay: Plugin<'bar'> = {
  id: 'abacusTimeline',
  afterDatasetsDraw(chart) {
    const { ctx, scales } = chart;
    const x = scales['x'];
    const y = scales['y'];
    if (x === undefined || y === undefined) return;
    const metas = (chart.options.plugins as { abacusMeta?: BarMeta[][] }).abacusMeta ?? [];
    const groupBoxes = new Map<DashboardGroup, { top: number; bottom: number }>();
    ctx.save();
    ctx.font = '10px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    chart.data.datasets.forEach((_ds, di) => {
      const meta = chart.getDatasetMeta(di);
      if (meta.hidden) return;
      meta.data.forEach((el, i) => {
        const m = metas[di]?.[i];
        if (m === undefined) return;
        const { x: bx, base, y: by, height } = el.getProps(['x', 'base', 'y', 'height'], true) as { x: number; base: number; y: number; height: number };
        const left = Math.min(bx, base);
        const width = Math.abs(bx - base);
        const box = groupBoxes.get(m.group);
        const top = by - height / 2;
        const bottom = by + height / 2;
        groupBoxes.set(m.group, box === undefined ? { top, bottom } : { top: Math.min(box.top, top), bottom: Math.max(box.bottom, bottom) });
        // the full label when it fits, else the operators and batch, else the query alone
        const text = m.labels.find((l) => ctx.measureText(l).width + 6 < width);
        if (text !== undefined) {
          ctx.fillStyle = '#111';
          ctx.fillText(text, left + 3, by);
        }
      });
    });
    for (const [g, box] of groupBoxes) {
      const x0 = x.getPixelForValue(g.launchMs);
      if (g.measuredMs !== null) {
        ctx.strokeStyle = '#111';
        ctx.lineWidth = 1.5;
        ctx.setLineDash([]);
        ctx.strokeRect(x0, box.top - 3, x.getPixelForValue(g.launchMs + g.measuredMs) - x0, box.bottom - box.top + 6);
      }
      if (g.predictedMs !== null) {
        const xp = x.getPixelForValue(g.launchMs + g.predictedMs);
        ctx.strokeStyle = '#d62728';
        ctx.lineWidth = 1.5;
        ctx.setLineDash([4, 3]);
        ctx.beginPath();
        ctx.moveTo(xp, box.top - 6);
        ctx.lineTo(xp, box.bottom + 6);
        ctx.stroke();
      }
    }
    ctx.restore();
  },
};

const timeline = new Chart($<HTMLCanvasElement>('timeline'), {
  type: 'bar',
  data: { labels: [], datasets: [] },
  options: {
    indexAxis: 'y',
    animation: false,
    maintainAspectRatio: false,
    responsive: true,
    scales: {
      x: { type: 'linear', title: { display: true, text: 'runtime clock (ms)' } },
      y: { type: 'category', title: { display: true, text: 'service' } },
    },
    plugins: {
      legend: { position: 'right' },
      tooltip: {
        callbacks: {
          label: (item) => {
            const m = ((item.chart.options.plugins as { abacusMeta?: BarMeta[][] }).abacusMeta ?? [])[item.datasetIndex]?.[item.dataIndex];
            if (m === undefined) return '';
            const g = m.group;
            return `${m.labels[0]} — group #${g.index}: measured ${fmt(g.measuredMs, 2)} ms, predicted ${fmt(g.predictedMs, 2)} ms`;
          },
        },
      },
    },
  },
  plugins: [timelineOverlay],
});

function drawTimeline(): void {
  const n = Number($<HTMLSelectElement>('window').value);
  const end = state.paused ? state.cursor : state.groups.length;
  const shown = state.groups.slice(Math.max(0, end - n), end);
  const lanes = state.services.map((s) => s.name);
  const datasets: ChartDataset<'bar', { x: [number, number]; y: string }[]>[] = [];
  const metas: BarMeta[][] = [];
  for (const s of state.services) {
    const data: { x: [number, number]; y: string }[] = [];
    const meta: BarMeta[] = [];
    for (const g of shown) {
      for (const seg of g.segments) {
        if (seg.service !== s.name) continue;
        const endMs = g.launchMs + (g.measuredMs ?? g.predictedMs ?? 0);
        data.push({ x: [g.launchMs, endMs], y: s.name });
        const q = seg.members > 1 ? `${seg.members}q·${seg.queryId}` : seg.queryId;
        meta.push({ group: g, labels: [`${q} [${seg.start},${seg.end}) ×${seg.batch}`, `${q} [${seg.start},${seg.end})`, `[${seg.start},${seg.end})`, q] });
      }
    }
    datasets.push({ label: s.name, data, backgroundColor: `${colourOf(s.name)}cc`, borderColor: colourOf(s.name), borderWidth: 1, grouped: false, barPercentage: 0.7, categoryPercentage: 1 });
    metas.push(meta);
  }
  (timeline.data as { labels: string[] }).labels = lanes;
  timeline.data.datasets = datasets as unknown as typeof timeline.data.datasets;
  (timeline.options.plugins as { abacusMeta?: BarMeta[][] }).abacusMeta = metas;
  const x = timeline.options.scales?.['x'];
  if (x !== undefined && shown.length > 0) {
    x.min = shown[0]!.launchMs;
    x.max = Math.max(...shown.map((g) => g.launchMs + Math.max(g.measuredMs ?? 0, g.predictedMs ?? 0)));
  }
  timeline.update('none');
  document.body.dataset['lanes'] = lanes.join(',');
  document.body.dataset['shownGroups'] = String(shown.length);
}

// ---------------------------------------------------------------- time series

function lineChart(id: string, yTitle: string, yMax?: number): Chart<'line', { x: number; y: number | null }[]> {
  return new Chart($<HTMLCanvasElement>(id), {
    type: 'line',
    data: { datasets: [] },
    options: {
      animation: false,
      maintainAspectRatio: false,
      responsive: true,
      parsing: false,
      spanGaps: true,
      elements: { point: { radius: 0 }, line: { borderWidth: 2 } },
      scales: {
        x: { type: 'linear', title: { display: true, text: 'runtime clock (s)' }, ticks: { maxTicksLimit: 6 } },
        y: { type: 'linear', beginAtZero: true, ...(yMax === undefined ? {} : { max: yMax }), title: { display: true, text: yTitle } },
      },
      plugins: { legend: { position: 'bottom', labels: { boxWidth: 12, font: { size: 11 }, filter: (item) => !(item.text ?? '').endsWith(' target') } } },
    },
  });
}

const p99Chart = lineChart('p99', 'p99 latency (ms)');
const violChart = lineChart('violations', 'violation ratio (%)', 100);
const queueChart = lineChart('queue', 'queued queries');
const mapeChart = lineChart('mape', 'MAPE (%)');

function drawSeries(): void {
  const series = state.series;
  const points = (f: (p: State['series'][number]) => number | null): { x: number; y: number | null }[] => series.map((p) => ({ x: p.tS, y: f(p) }));
  p99Chart.data.datasets = state.services.flatMap((s, i) => [
    { label: s.name, data: points((p) => p.p99[i] ?? null), borderColor: colourOf(s.name), backgroundColor: colourOf(s.name) },
    { label: `${s.name} target`, data: series.length === 0 ? [] : [{ x: series[0]!.tS, y: s.qosTargetMs }, { x: series[series.length - 1]!.tS, y: s.qosTargetMs }], borderColor: colourOf(s.name), borderDash: [6, 4], borderWidth: 1.5, backgroundColor: colourOf(s.name) },
  ]);
  violChart.data.datasets = state.services.map((s, i) => ({ label: s.name, data: points((p) => { const v = p.viol[i]; return v === null || v === undefined ? null : v * 100; }), borderColor: colourOf(s.name), backgroundColor: colourOf(s.name) }));
  queueChart.data.datasets = state.services.map((s, i) => ({ label: s.name, data: points((p) => p.queue[i] ?? 0), borderColor: colourOf(s.name), backgroundColor: colourOf(s.name), stepped: true }));
  mapeChart.data.datasets = [{ label: 'rolling MAPE', data: points((p) => p.mape), borderColor: '#333', backgroundColor: '#333' }];
  for (const c of [p99Chart, violChart, queueChart, mapeChart]) c.update('none');
}

// ---------------------------------------------------------------- tables and banner

function drawTables(): void {
  const u = state.last;
  if (u === undefined) return;
  const rows = u.services.map((s) => {
    const v = s.violationRatio;
    const p99Bad = s.p99Ms !== null && s.p99Ms > s.qosTargetMs;
    return `<tr><td><span class="swatch" style="background:${colourOf(s.service)}"></span>${esc(s.service)}</td><td>${fmt(s.qosTargetMs, 0)}</td><td class="${p99Bad ? 'bad' : 'ok'}">${fmt(s.p99Ms)}</td><td class="${v !== null && v > 0.01 ? 'bad' : 'ok'}">${v === null ? '–' : `${(v * 100).toFixed(1)} %`}</td><td>${s.ended}</td><td>${s.rejected}</td><td>${s.queueDepth}</td></tr>`;
  });
  $('qos-table').querySelector('tbody')!.innerHTML = rows.join('');
  $('window-note').textContent = `last ${(state.windowMs / 1000).toFixed(0)} s`;
  const p = u.predictor;
  $('predictor-note').textContent =
    (p.source === null ? '(no predictions: the policy does not predict)' : `${fmt(p.rollingMapePct)} % over ${p.groups} groups${p.source === 'refinement' ? ` (online refinement; guard ${p.guardActive === true ? `ON ×${fmt(p.guardFactor, 2)}` : 'off'})` : ' (predicted vs measured, kept groups)'}`) +
    (p.fallbackActive === undefined ? '' : `; fallback ${p.fallbackActive ? 'ON: one query at a time' : 'off'}`);
  $('rejections').querySelector('tbody')!.innerHTML = [...state.rejections]
    .reverse()
    .map((r) => `<tr><td>${(r.atMs / 1000).toFixed(2)}</td><td><span class="swatch" style="background:${colourOf(r.service)}"></span>${esc(r.service)}</td><td class="reason">${esc(r.reason)}</td><td>${fmt(r.waitedMs)}</td><td class="detail" title="${esc(r.detail)}">${esc(r.detail.length > 44 ? `${r.detail.slice(0, 43)}…` : r.detail)}</td></tr>`)
    .join('');
  $('counts').textContent = `${state.updates} updates · ${state.groups.length} groups kept${u.skippedGroups > 0 ? ` · ${u.skippedGroups} skipped (rate bound)` : ''}`;
}

function esc(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function setStatus(status: string, banner?: { text: string; level: 'warn' | 'error' }): void {
  const badge = $('status');
  badge.textContent = status.replace('_', ' ');
  badge.className = `badge ${status}`;
  document.body.dataset['status'] = status;
  const b = $('banner');
  b.className = banner === undefined ? '' : `show ${banner.level}`;
  b.textContent = banner?.text ?? '';
}

function statusOf(u: DashboardUpdate): void {
  if (u.status === 'ready') setStatus('ready');
  else if (u.status === 'not_ready') setStatus('not_ready', { text: 'The server is not ready yet (loading models, profiling or warming up); the dashboard fills once it serves.', level: 'warn' });
  else if (u.status === 'closing') setStatus('closing', { text: 'The server is shutting down.', level: 'error' });
  else setStatus('done', { text: 'The replay reached the end of the simulation.', level: 'warn' });
}

// ---------------------------------------------------------------- stream

function render(): void {
  drawTimeline();
  drawSeries();
  drawTables();
}

function onHello(h: DashboardHello): void {
  state.services = h.services;
  state.colour = new Map(h.services.map((s, i) => [s.name, PALETTE[i % PALETTE.length]!]));
  state.windowMs = h.windowMs;
  state.groups = [];
  state.rejections = [];
  state.series = [];
  $('mode').textContent = h.mode === 'replay' ? `replay at ${h.speed}×` : 'live';
}

function onUpdate(u: DashboardUpdate): void {
  state.updates++;
  state.last = u;
  state.groups.push(...u.groups);
  if (state.groups.length > KEEP_GROUPS) state.groups.splice(0, state.groups.length - KEEP_GROUPS);
  state.rejections.push(...u.rejections);
  if (state.rejections.length > KEEP_REJECTIONS) state.rejections.splice(0, state.rejections.length - KEEP_REJECTIONS);
  if (u.nowMs !== null) {
    const prev = state.series[state.series.length - 1];
    const point = { tS: u.nowMs / 1000, p99: u.services.map((s) => s.p99Ms), viol: u.services.map((s) => s.violationRatio), queue: u.services.map((s) => s.queueDepth), mape: u.predictor.rollingMapePct };
    if (prev !== undefined && prev.tS === point.tS) state.series[state.series.length - 1] = point;
    else state.series.push(point);
    if (state.series.length > KEEP_POINTS) state.series.splice(0, state.series.length - KEEP_POINTS);
  }
  document.body.dataset['updates'] = String(state.updates);
  document.body.dataset['groups'] = String(state.groups.length);
  statusOf(u);
  const scrub = $<HTMLInputElement>('scrub');
  scrub.max = String(state.groups.length);
  if (!state.paused) render();
}

function connect(): void {
  const es = new EventSource('/dashboard/events');
  es.addEventListener('hello', (e) => {
    state.gone = false;
    onHello(JSON.parse((e as MessageEvent<string>).data) as DashboardHello);
  });
  es.addEventListener('update', (e) => onUpdate(JSON.parse((e as MessageEvent<string>).data) as DashboardUpdate));
  es.addEventListener('bye', (e) => {
    const bye = JSON.parse((e as MessageEvent<string>).data) as DashboardBye;
    if (state.last?.status === 'done') return;
    setStatus('gone', { text: `The server closed the stream: ${bye.reason}. Reconnecting when it is back…`, level: 'error' });
  });
  es.addEventListener('error', () => {
    if (state.last?.status === 'done') {
      es.close();
      return;
    }
    state.gone = true;
    setStatus('gone', { text: 'The server is gone (no connection to /dashboard/events). Reconnecting…', level: 'error' });
  });
}

// ---------------------------------------------------------------- controls

const pauseButton = $<HTMLButtonElement>('pause');
const scrub = $<HTMLInputElement>('scrub');
const replayButton = $<HTMLButtonElement>('replay');

function stopReplay(): void {
  if (state.replayTimer !== undefined) window.clearTimeout(state.replayTimer);
  state.replayTimer = undefined;
  replayButton.textContent = 'Replay';
}

pauseButton.addEventListener('click', () => {
  state.paused = !state.paused;
  pauseButton.textContent = state.paused ? 'Resume' : 'Pause';
  scrub.disabled = !state.paused;
  replayButton.disabled = !state.paused;
  document.body.dataset['paused'] = String(state.paused);
  stopReplay();
  state.cursor = state.groups.length;
  scrub.max = String(state.groups.length);
  scrub.value = String(state.cursor);
  render();
});

scrub.addEventListener('input', () => {
  stopReplay();
  state.cursor = Number(scrub.value);
  drawTimeline();
});

replayButton.addEventListener('click', () => {
  if (state.replayTimer !== undefined) {
    stopReplay();
    return;
  }
  const n = Number($<HTMLSelectElement>('window').value);
  state.cursor = Math.min(n, state.groups.length);
  replayButton.textContent = 'Stop';
  // one group per step, waiting as long as the runtime clock did between their launches (10 ms … 1 s)
  const step = (): void => {
    if (state.cursor >= state.groups.length) {
      stopReplay();
      return;
    }
    state.cursor++;
    scrub.value = String(state.cursor);
    drawTimeline();
    const a = state.groups[state.cursor - 1];
    const b = state.groups[state.cursor];
    const gap = a === undefined || b === undefined ? 0 : b.launchMs - a.launchMs;
    state.replayTimer = window.setTimeout(step, Math.min(1000, Math.max(10, gap)));
  };
  step();
});

$<HTMLSelectElement>('window').addEventListener('change', drawTimeline);

connect();
