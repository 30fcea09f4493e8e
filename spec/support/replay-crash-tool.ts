/** The tool of the crash-replay test (spec/testing-replay.test.ts) as its recording and its replays declare it; each gives its own `execute`. */
export const DEPLOY = {
  name: 'deploy',
  description: 'deploys the project',
  inputSchema: { type: 'object', properties: { target: { type: 'string' } }, required: ['target'] },
} as const
