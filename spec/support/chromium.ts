/**
 * Debian's Chromium, headless, for the browser tests (playwright-core downloads no browser): the
 * flags keep it from reaching the network on its own (updates, sync, QUIC probes) while a test runs.
 */
import { type Browser, chromium } from 'playwright-core'

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    timeout: 30_000,
  })
}
