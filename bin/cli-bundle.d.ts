// Types of bin/cli-bundle.js (plain JavaScript, read before any TypeScript loader runs).
export declare const BUNDLE_DIR: string;
export declare const BUNDLE_ENTRY: string;
export declare const BUNDLE_MANIFEST: string;
export declare function freshBundle(root: string): string | undefined;
export declare const BUILD_INPUTS: readonly string[];
export declare function inputTimes(root: string): Record<string, number>;
