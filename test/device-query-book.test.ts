/** QueryBook (src/device/query-book.ts): caps, eviction order, release semantics. */
import { describe, expect, it } from 'vitest';
import { QueryBook } from '../src/device/query-book.ts';

const at = (service: string, next: number) => ({ service, next, batchSize: 1, seqLen: 1 });

/** Run one segment of `queryId` that stops at `next` (state kept). */
function keepOne(book: QueryBook, queryId: string, service: string, next: number) {
  expect(book.beginSegment(queryId, service, false)).toBeUndefined();
  return book.finishKept(queryId, at(service, next));
}

describe('QueryBook', () => {
  it('tracks a query through segments: in flight, kept, forgotten at the end', () => {
    const book = new QueryBook(10, 10);
    expect(book.beginSegment('q', 'a', false)).toBeUndefined();
    expect(book.inFlight.get('q')).toBe('a');
    expect(book.ownerOf('q')).toBe('a');
    expect(book.finishKept('q', at('a', 2))).toEqual({ released: false, evicted: [] });
    expect(book.inFlight.has('q')).toBe(false);
    expect(book.kept.get('q')).toEqual(at('a', 2));
    expect(book.beginSegment('q', 'a', true)).toBeUndefined();
    expect(book.kept.has('q')).toBe(false);
    book.finishDone('q');
    expect(book.ownerOf('q')).toBeUndefined();
  });

  it('evicts the oldest kept queries beyond maxKept, marking them lost; a kept-again query is newest', () => {
    const book = new QueryBook(2, 10);
    keepOne(book, 'q1', 'a', 1);
    keepOne(book, 'q2', 'b', 1);
    keepOne(book, 'q1', 'a', 2); // resumed and kept again: now newest
    const { evicted } = keepOne(book, 'q3', 'a', 1);
    expect(evicted).toEqual([{ queryId: 'q2', service: 'b' }]);
    expect([...book.kept.keys()]).toEqual(['q1', 'q3']);
    expect(book.lost.get('q2')?.reason).toMatch(/^evicted: more than maxKeptQueries 2 /);
    // A resume of a lost query returns its loss once; afterwards it is unknown.
    expect(book.beginSegment('q2', 'b', true)?.service).toBe('b');
    expect(book.inFlight.has('q2')).toBe(false);
    expect(book.ownerOf('q2')).toBeUndefined();
  });

  it('forgets the oldest lost queries beyond maxLost', () => {
    const book = new QueryBook(10, 2);
    for (const q of ['q1', 'q2', 'q3']) {
      book.beginSegment(q, 'a', false);
      book.finishFailed(q, 'a', `died ${q}`);
    }
    expect([...book.lost.keys()]).toEqual(['q2', 'q3']);
    book.beginSegment('q4', 'a', false);
    book.finishFailed('q4', 'a'); // no lost reason: forgotten
    expect(book.ownerOf('q4')).toBeUndefined();
  });

  it('loseKept marks every query kept in a service lost', () => {
    const book = new QueryBook(10, 10);
    keepOne(book, 'q1', 'a', 1);
    keepOne(book, 'q2', 'b', 1);
    book.loseKept('a', 'executor exited');
    expect([...book.kept.keys()]).toEqual(['q2']);
    expect(book.lost.get('q1')).toEqual({ service: 'a', reason: 'executor exited' });
  });

  it('release: unknown, free now in the owning service, or defer until the result', () => {
    const book = new QueryBook(10, 10);
    expect(book.release('a', 'nobody')).toEqual({ kind: 'unknown' });
    keepOne(book, 'k', 'a', 1);
    expect(book.release('a', 'k')).toEqual({ kind: 'free', service: 'a' });
    expect(book.ownerOf('k')).toBeUndefined();
    book.beginSegment('l', 'a', false);
    book.finishFailed('l', 'a', 'gone');
    expect(book.release('a', 'l')).toEqual({ kind: 'free', service: 'a' });
    expect(book.lost.has('l')).toBe(false);

    book.beginSegment('r', 'a', false);
    expect(book.release('a', 'r')).toEqual({ kind: 'defer' });
    expect(book.finishKept('r', at('a', 1))).toEqual({ released: true, evicted: [] });
    expect(book.ownerOf('r')).toBeUndefined();
    // Released while running: a failure does not mark it lost either.
    book.beginSegment('f', 'a', false);
    book.release('a', 'f');
    book.finishFailed('f', 'a', 'died');
    expect(book.ownerOf('f')).toBeUndefined();
  });

  it('release of a query owned by another service throws and drops nothing', () => {
    const book = new QueryBook(10, 10);
    keepOne(book, 'q', 'a', 1);
    expect(() => book.release('b', 'q')).toThrow(RangeError);
    expect(() => book.release('b', 'q')).toThrow(/belongs to service 'a', not 'b'/);
    expect(book.kept.has('q')).toBe(true);
    book.beginSegment('r', 'a', false);
    expect(() => book.release('b', 'r')).toThrow(RangeError);
    expect(book.inFlight.get('r')).toBe('a');
  });

  it('clear forgets everything', () => {
    const book = new QueryBook(10, 10);
    keepOne(book, 'q', 'a', 1);
    book.beginSegment('r', 'a', false);
    book.clear();
    expect(book.kept.size + book.lost.size + book.inFlight.size).toBe(0);
  });
});
