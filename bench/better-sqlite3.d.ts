/**
 * The slice of better-sqlite3's API the LangGraph baseline touches (the package ships no types and
 * `@types/better-sqlite3` is not a dependency). `SqliteSaver`'s declarations import `Database` and
 * `Statement` from here.
 */
declare module 'better-sqlite3' {
  const BetterSqlite3: new (filename: string, options?: Record<string, unknown>) => BetterSqlite3.Database
  namespace BetterSqlite3 {
    interface Statement {
      run(...params: unknown[]): unknown
      get(...params: unknown[]): unknown
      all(...params: unknown[]): unknown[]
    }
    interface Database {
      pragma(source: string, options?: { simple?: boolean }): unknown
      prepare(source: string): Statement
      exec(source: string): Database
      close(): Database
    }
  }
  export = BetterSqlite3
}
