/** Small zoo variants used by tests: same architecture and operator count, tiny tensors. */
import type { ZooModelName } from '../../src/model/zoo/index.ts';

export const SMALL_VARIANTS: Record<ZooModelName, Record<string, number>> = {
  resnet50: { resolution: 32, widthMultiplier: 0.125, numClasses: 10 },
  resnet101: { resolution: 32, widthMultiplier: 0.125, numClasses: 10 },
  resnet152: { resolution: 32, widthMultiplier: 0.125, numClasses: 10 },
  inception_v3: { resolution: 75, widthMultiplier: 0.125, numClasses: 10 },
  vgg16: { resolution: 32, widthMultiplier: 0.125, numClasses: 10 },
  vgg19: { resolution: 32, widthMultiplier: 0.125, numClasses: 10 },
  bert: { layers: 4, hidden: 64, heads: 2, vocabSize: 1000, maxPositions: 64, defaultSeqLen: 16 },
};
