/**
 * On-disk form of a partitioned model (docs/design.md#model-and-partitioning): one directory holding
 *   spec.json        the ModelSpec
 *   model.onnx       the whole model
 *   op-000.onnx …    operator k as a standalone ONNX sub-model
 * Written atomically (temp dir + rename), so a crash never leaves a half-written entry.
 */
import path from 'node:path';
import type { ModelSpec } from './spec.ts';

/** A partitioned model on disk. Paths are absolute. */
export interface ModelArtifact {
  readonly spec: ModelSpec;
  readonly dir: string;
  /** The whole model (used as the baseline of the split-overhead benchmark and for checks). */
  readonly modelPath: string;
  /** `operatorPaths[k]` is operator k's sub-model; length = spec.operators.length. */
  readonly operatorPaths: readonly string[];
}

export const SPEC_FILE = 'spec.json';
export const MODEL_FILE = 'model.onnx';

/** File name of operator `index`'s sub-model inside an artifact directory. */
export function operatorFileName(index: number): string {
  return `op-${String(index).padStart(3, '0')}.onnx`;
}

/** Paths of an artifact rooted at `dir` for `spec`. */
export function artifactAt(dir: string, spec: ModelSpec): ModelArtifact {
  const abs = path.resolve(dir);
  return {
    spec,
    dir: abs,
    modelPath: path.join(abs, MODEL_FILE),
    operatorPaths: spec.operators.map((op) => path.join(abs, operatorFileName(op.index))),
  };
}
