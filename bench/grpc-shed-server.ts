/**
 * The server side of `npm run bench -- --only grpc-shed`: the project's gRPC front end
 * (`createGrpcServer`) over a backend that sheds every inference request, either on the call's
 * metadata (`meta`: `shedUnread` throws, as `RuntimeBackend` does when every model would shed)
 * or once the message was read, on its model (`handler`: `admit` throws, as before the metadata
 * check existed). `node --import tsx bench/grpc-shed-server.ts meta|handler` prints `port N`.
 */
import { createGrpcServer } from '../src/serve/grpc/server.ts';
import { ServeError, type InferenceBackend, type ModelConfig, type ModelMetadata, type ModelStatistics, type RepositoryIndexEntry, type ServerMetadata } from '../src/serve/inference.ts';

/** Every inference request shed where `mode` says; the rest of the protocol answers as a server with no models would. */
export class SheddingBackend implements InferenceBackend {
  constructor(private readonly mode: 'meta' | 'handler') {}
  serverMetadata(): ServerMetadata {
    return { name: 'grpc-shed-bench', version: '0', extensions: [] };
  }
  isLive(): boolean {
    return true;
  }
  isReady(): boolean {
    return true;
  }
  modelReady(): boolean {
    return false;
  }
  modelMetadata(name: string): ModelMetadata {
    throw new ServeError('model_not_found', `unknown model '${name}'`);
  }
  modelList(): string[] {
    return [];
  }
  repositoryIndex(): RepositoryIndexEntry[] {
    return [];
  }
  loadModel(name: string): Promise<void> {
    return Promise.reject(new ServeError('forbidden', `load '${name}': model control is off`));
  }
  unloadModel(name: string): Promise<void> {
    return Promise.reject(new ServeError('forbidden', `unload '${name}': model control is off`));
  }
  modelConfig(name: string): ModelConfig {
    throw new ServeError('model_not_found', `unknown model '${name}'`);
  }
  modelStatistics(): ModelStatistics[] {
    return [];
  }
  infer(): Promise<never> {
    return Promise.reject(new ServeError('internal', 'the grpc-shed benchmark backend admits nothing'));
  }
  admit(modelName: string): never {
    throw new ServeError('overloaded', `overloaded: model '${modelName}': shed (benchmark)`);
  }
  shedUnread(): undefined {
    if (this.mode === 'meta') throw new ServeError('overloaded', 'overloaded: every model: shed (benchmark)');
    return undefined;
  }
}

if (process.argv[1] !== undefined && import.meta.url.endsWith(process.argv[1].split('/').pop() ?? '')) {
  const mode = process.argv[2] === 'handler' ? 'handler' : 'meta';
  const server = createGrpcServer(new SheddingBackend(mode), { maxReceiveMessageBytes: 64 << 20 });
  const port = await server.listen('127.0.0.1', 0);
  process.stdout.write(`port ${port}\n`);
}
