/**
 * `FactstateError` details are declared code by code (errors.ts `FactstateErrorDetails`): a
 * construction with the wrong details, or without details its code always has, or with a code that
 * could be either of two, does not type-check (the `@ts-expect-error` lines below fail `npm run
 * typecheck` if it ever does), and `isFactstateError(error, code)` types them.
 */
import { existsSync } from 'node:fs'
import { mkdir, readdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { test } from 'uvu'
import * as assert from 'uvu/assert'
import { EventLog, FactstateError, type FactstateErrorCode, type FactstateErrorOf, type LogIoReason, isFactstateError } from '../index.js'
import { assertDetailsFit } from './support/error-details.js'
import { completeInvocation, refusal, withLog } from './support/log-fixtures.js'
import { rejectsWithCode } from './support/codes.js'
import { withTempDir, withTimeout } from './support/temp.js'

test('construction is checked against the code: its details, required ones, one code at a time', () => {
  const made = [
    new FactstateError('LOG_CONFLICT', 'taken', { details: { seq: 7 } }),
    new FactstateError('LOG_IO', 'disk'),
    new FactstateError('RUN_BUSY', 'busy', { details: { sessionId: 's', reason: 'active', runId: 'r', invocationId: 'i' } }),
    // @ts-expect-error `sek` is not a member of LOG_CONFLICT's details
    new FactstateError('LOG_CONFLICT', 'taken', { details: { sek: 7 } }),
    // @ts-expect-error RUN_BUSY always has details
    new FactstateError('RUN_BUSY', 'busy'),
    // @ts-expect-error LOG_IO's details are a reason and a path, not LOG_CORRUPT's file
    new FactstateError('LOG_IO', 'disk', { details: { file: 'x' } }),
    // @ts-expect-error a code that could be either of two could carry the other's details
    new FactstateError(Math.random() > 2 ? 'LOG_REJECTED_FACT' : 'HANDOFF_MISMATCH', 'reserved', { details: { eventId: 'e' } }),
  ]
  assert.equal(
    made.map((error) => [error.name, error.code, error instanceof Error, error instanceof FactstateError]),
    [
      ['FactstateError', 'LOG_CONFLICT', true, true],
      ['FactstateError', 'LOG_IO', true, true],
      ['FactstateError', 'RUN_BUSY', true, true],
      ['FactstateError', 'LOG_CONFLICT', true, true],
      ['FactstateError', 'RUN_BUSY', true, true],
      ['FactstateError', 'LOG_IO', true, true],
      ['FactstateError', 'HANDOFF_MISMATCH', true, true],
    ],
  )
  assert.is(made[0]?.message, 'LOG_CONFLICT: taken')
  // The ones that type-check fit the shapes the suite checks refusals against; the others do not.
  assert.equal(
    made.map((error) => {
      try {
        assertDetailsFit(error, error.code)
        return true
      } catch {
        return false
      }
    }),
    [true, true, true, false, false, false, false],
  )
})

test('isFactstateError(error, code) narrows the code and types the details; without a code, to every refusal, each code with its details', () =>
  withTimeout(
    withTempDir(async (dir) => {
      const log = await EventLog.open(dir)
      try {
        const error: unknown = await refusal(log.prefix(-1, 10))
        assert.ok(isFactstateError(error))
        assert.not.ok(isFactstateError(error, 'LOG_CONFLICT'))
        assert.not.ok(isFactstateError(new Error('plain'), 'LOG_INVALID_ARGUMENT'))
        if (!isFactstateError(error, 'LOG_INVALID_ARGUMENT')) throw new Error('expected LOG_INVALID_ARGUMENT')
        // Typed: `notALog`, `destination` and `field` are the only members LOG_INVALID_ARGUMENT's details may have.
        const notALog: true | undefined = error.details?.notALog
        assert.is(notALog, undefined)
        // @ts-expect-error no `seq` in LOG_INVALID_ARGUMENT's details
        assert.is(error.details?.seq, undefined)
        const any: unknown = error
        if (isFactstateError(any)) {
          // Without a code: every refusal, each code with its details, so a switch on the code types them.
          const typed: FactstateErrorOf<FactstateErrorCode> = any
          // @ts-expect-error `seq` is in some codes' details, not all: the code tells which
          void any.details?.seq
          const field: string | undefined = typed.code === 'LOG_INVALID_ARGUMENT' ? typed.details?.field : 'another code'
          assert.is(field, undefined, 'LOG_INVALID_ARGUMENT, its details without a field')
        }
        const conflict = new FactstateError('LOG_CONFLICT', 'taken', { details: { seq: 3 } }) as unknown
        if (!isFactstateError(conflict, 'LOG_CONFLICT')) throw new Error('expected LOG_CONFLICT')
        assert.is('seq' in conflict.details ? conflict.details.seq : undefined, 3)
      } finally {
        await log.close()
      }
    }),
    10_000,
  ))

test('FactstateErrorOf a union of codes is the union of those errors: switch (error.code) types the details in each case', () => {
  const describe = (error: FactstateErrorOf<'RUN_BUSY' | 'RUN_INVALID_INPUT' | 'LOG_IO'>): string => {
    switch (error.code) {
      case 'RUN_BUSY': {
        const reason: 'active' | 'paused' | 'source_running' = error.details.reason
        return `${reason} ${error.details.runId}`
      }
      case 'RUN_INVALID_INPUT':
        // @ts-expect-error RUN_INVALID_INPUT's `reason` is only 'exists', not RUN_BUSY's
        assert.not.ok(error.details.reason === 'active')
        return error.details.fields.join(',')
      case 'LOG_IO': {
        // @ts-expect-error a reason is one of the listed few
        const wrong: 'disk_full' | undefined = error.details?.reason
        const reason: LogIoReason | undefined = error.details?.reason
        return String(wrong === undefined ? reason : wrong)
      }
      default: {
        const rest: never = error
        return rest
      }
    }
  }
  const made: unknown[] = [
    new FactstateError('RUN_BUSY', 'busy', { details: { sessionId: 's', reason: 'paused', runId: 'r', invocationId: 'i', turnId: 't' } }),
    new FactstateError('RUN_INVALID_INPUT', 'bad', { details: { fields: ['maxSteps', 'configuration.cwd'] } }),
    new FactstateError('LOG_IO', 'disk'),
    new FactstateError('LOG_CONFLICT', 'taken', { details: { seq: 1 } }),
  ]
  assert.equal(
    made.map((error) => (isFactstateError(error, 'RUN_BUSY') || isFactstateError(error, 'RUN_INVALID_INPUT') || isFactstateError(error, 'LOG_IO') ? describe(error) : 'other')),
    ['paused r', 'maxSteps,configuration.cwd', 'undefined', 'other'],
  )
  // Every refusal, narrowed by its code alone.
  const any = made[3] as FactstateErrorOf<FactstateErrorCode>
  assert.is(any.code === 'LOG_CONFLICT' && 'seq' in any.details ? any.details.seq : undefined, 1)
})

test('a subclass names its code; isFactstateError takes a code that may be undefined', () => {
  class DiskFull extends FactstateError<'LOG_IO'> {
    constructor() {
      super('LOG_IO', 'the disk is full')
    }
  }
  // The code a construction names is the error's code, a subclass's included.
  const made = new DiskFull()
  const ioCode: 'LOG_IO' = made.code
  const busyCode: 'RUN_BUSY' = new FactstateError('RUN_BUSY', 'busy', { details: { sessionId: 's', reason: 'active', runId: 'r', invocationId: 'i' } }).code
  // @ts-expect-error a LOG_IO error's code is no other
  const wrong: 'LOG_CORRUPT' = made.code
  assert.equal([ioCode, busyCode, wrong], ['LOG_IO', 'RUN_BUSY', 'LOG_IO'])
  const error: unknown = made
  const maybe = (Math.random() > 2 ? 'LOG_CORRUPT' : undefined) as 'LOG_CORRUPT' | undefined
  assert.ok(isFactstateError(error, maybe))
  assert.not.ok(isFactstateError(error, 'LOG_CORRUPT'))
  assert.ok(isFactstateError(error, 'LOG_IO') && error instanceof DiskFull && error.message === 'LOG_IO: the disk is full')
})

test("'there is no log' carries { reason: 'no_log', path } (an exporter started first waits on it); digestAt past the end names the seq and the high-water; a snapshot's follow names follow", () =>
  withTimeout(
    withTempDir(async (dir) => {
      const missing = join(dir, 'not-yet')
      await mkdir(join(dir, 'empty'))
      await writeFile(join(dir, 'a-file'), 'x')
      const noLogs = [
        ['openSnapshot of a missing directory', () => EventLog.openSnapshot(missing), missing],
        ['openSnapshot of an empty directory', () => EventLog.openSnapshot(join(dir, 'empty')), join(dir, 'empty')],
        ['openSnapshot of a file', () => EventLog.openSnapshot(join(dir, 'a-file')), join(dir, 'a-file')],
        ['open with create: false', () => EventLog.open(missing, { create: false }), missing],
        ['backup of a missing log', () => EventLog.backup(missing, join(dir, 'backup')), missing],
      ] as const
      for (const [what, call, path] of noLogs) {
        const error = await rejectsWithCode(call, 'LOG_INVALID_ARGUMENT', what)
        assert.equal(error.details, { reason: 'no_log', path }, what)
        assert.ok(isFactstateError(error, 'LOG_INVALID_ARGUMENT') && error.details?.reason === 'no_log', what)
      }
      assert.equal(await readdir(join(dir, 'empty')), [], 'nothing was made')
      assert.not.ok(existsSync(missing) || existsSync(join(dir, 'backup')), 'nothing was made')
      // A bad argument has no reason: only a missing log is waited for.
      const bad = await rejectsWithCode(() => EventLog.openSnapshot(join(dir, 'empty'), { directory: '' }), 'LOG_INVALID_ARGUMENT', 'a bad directory')
      assert.equal(bad.details, { field: 'directory' })

      const path = join(dir, 'log')
      await withLog(path, async (log) => {
        for (const event of completeInvocation('a')) await log.append(event)
        const { highWater } = log.head()
        for (const seq of [highWater + 1, -1, 1.5]) {
          const error = await rejectsWithCode(() => log.digestAt(seq), 'LOG_INVALID_ARGUMENT', `digestAt(${seq})`)
          assert.equal(error.details, { field: 'seq', highWater }, `digestAt(${seq})`)
        }
      })
      const snapshot = await EventLog.openSnapshot(path)
      try {
        const error = await rejectsWithCode(async () => snapshot.events({ follow: true }), 'LOG_INVALID_ARGUMENT', "a snapshot's follow")
        assert.equal(error.details, { field: 'follow' })
      } finally {
        await snapshot.close()
      }
    }),
    20_000,
  ),
)

test.run()
