/**
 * The paper's MIG experiment (`abacus reproduce mig`, docs/reproduction.md; Abacus SC'21 §7.5 "Integrating with MIGs",
 * Figs. 18–19): the same co-located pairs on one A100 MIG instance — `1g.5gb`, `2g.10gb`,
 * `4g.20gb` — and on the whole GPU, under Abacus and FCFS: peak goodput at ≤ 1 % violations
 * (`findPeakRate`) and the 99th percentile at that peak.
 *
 * The slices are the simulator's `sim:a100:mig-<k>g` profiles (`device/sim/profiles.ts`):
 * k of 7 compute slices at 14 SMs each and 1, 2 or 4 of 8 memory slices (capacity and
 * bandwidth), per NVIDIA's MIG User Guide, "Supported MIG Profiles", A100-SXM4-40GB table
 * (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html).
 * Every device gets its own profile and predictor (as the paper trains one per MIG size).
 * Queries are small (`MIG_BATCH_SIZES`), on every device alike.
 */
import type { ColocationRow } from './colocation.ts';
import type { PaperWorkload } from './workloads.ts';

/** A device of the MIG experiment. */
export interface MigDevice {
  /** Sim device id. */
  readonly id: string;
  /** Label in tables and plots: `1g`, `2g`, `4g`, `whole`. */
  readonly label: string;
  /** Compute slices (of 7; the whole GPU: 7, though it has 108 SMs rather than 98). */
  readonly slices: number;
  /** Instances of this size one A100 holds (MIG User Guide: 7 × 1g, 3 × 2g, 1 × 4g; whole: 1). */
  readonly perGpu: number;
}

/** The instances compared, smallest first, then the whole GPU. */
export const MIG_DEVICES: readonly MigDevice[] = [
  { id: 'sim:a100:mig-1g', label: '1g', slices: 1, perGpu: 7 },
  { id: 'sim:a100:mig-2g', label: '2g', slices: 2, perGpu: 3 },
  { id: 'sim:a100:mig-4g', label: '4g', slices: 4, perGpu: 1 },
  { id: 'sim:a100', label: 'whole', slices: 7, perGpu: 1 },
];

/**
 * Pairs of the MIG experiment (from the §7.3 sets, with their QoS targets): a launch-bound
 * pair, two pairs with a bandwidth-heavy VGG and one with BERT. `--quick` runs the first two.
 */
export const MIG_PAIRS: readonly string[] = ['resnet50+vgg16', 'vgg16+bert', 'resnet101+bert', 'inception_v3+vgg19'];

/**
 * Batch sizes of the MIG experiment's queries, on every device: small queries, what MIG slices
 * are for. With the co-location experiments' 1–16, a BERT query of batch 16 alone takes longer
 * than its pair's QoS target on a 1g or 2g instance (e.g. 74 ms at sequence 32 on 1g vs a 60 ms
 * target), so no rate would meet ≤ 1 % violations. Our choice; the paper does not state its MIG
 * query shapes.
 */
export const MIG_BATCH_SIZES: readonly number[] = [1, 2, 4];

/** One (device, pair, policy). */
export interface MigRow extends ColocationRow {
  readonly device: string;
  readonly slice: string;
  /** Peak goodput × instances of this size per A100 (what one GPU split this way would serve), queries/s. */
  readonly perGpuPeakQps: number;
}

/**
 * Run the pairs on every device, each (device, pair) a unit started at once (`runPair`: the pair
 * under every policy on that device, with its predictor, at `MIG_BATCH_SIZES`, e.g. `runWorkload`
 * in this thread or a pool's thread, `reproduce/units.ts`); rows in device, pair order.
 * @throws RangeError for a pair not among `workloads`.
 */
export async function runMig(
  workloads: readonly PaperWorkload[],
  runPair: (device: MigDevice, w: PaperWorkload) => Promise<ColocationRow[]>,
  options: { pairs: readonly string[]; devices?: readonly MigDevice[]; onProgress?: (line: string) => void },
): Promise<MigRow[]> {
  const sets = options.pairs.map((p) => {
    const w = workloads.find((x) => x.models.join('+') === p);
    if (w === undefined) throw new RangeError(`MIG pair '${p}' is not among the workloads (${workloads.map((x) => x.models.join('+')).join(', ')})`);
    return w;
  });
  const perPair = await Promise.all(
    (options.devices ?? MIG_DEVICES).flatMap((device) =>
      sets.map(async (w) => {
        const r = await runPair(device, w);
        options.onProgress?.(`mig: ${w.models.join('+')} on ${device.id} done\n`);
        return r.map((x): MigRow => ({ ...x, device: device.id, slice: device.label, perGpuPeakQps: (x.peakGoodputQps ?? 0) * device.perGpu }));
      }),
    ),
  );
  return perPair.flat();
}
