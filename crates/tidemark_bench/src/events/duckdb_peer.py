# The DuckDB peer of `tidemark-bench events` (PyPI's `duckdb`): the same rows Tidemark rolls up
# or reports on, loaded into a DuckDB database file, and the same question asked in SQL.
#
# argv[1]: a JSON object {"db": path, "load": [[table, kind, path], ...], "query": sql}, where
# kind is "parquet" or "csv" (with a header line). The tables are loaded once, untimed. Then
# every line on stdin asks for one timed run of the query, answered with one line of JSON:
# {"secs": wall seconds, "rows": result rows, "sums": [sum of each numeric column]}.
# Each run reads the result whole, so its time includes handing the rows over, as Tidemark's
# does. A line "bytes" answers {"bytes": the database file's size}; a line "threads N" sets
# DuckDB's worker threads (0: back to its default, one per core) and answers {"threads": N}.
import json
import os
import sys
import time

import duckdb

spec = json.loads(sys.argv[1])
con = duckdb.connect(spec["db"])
# A load or query longer than 2 s would otherwise draw a progress bar on stdout, the
# protocol's channel.
con.execute("SET enable_progress_bar = false")
for table, kind, path in spec["load"]:
    reader = "read_parquet(?)" if kind == "parquet" else "read_csv(?, header = true)"
    con.execute(f"CREATE TABLE {table} AS SELECT * FROM {reader}", [path])
con.execute("CHECKPOINT")
print(json.dumps({"ready": True}), flush=True)

for line in sys.stdin:
    if line.strip() == "bytes":
        print(json.dumps({"bytes": os.path.getsize(spec["db"])}), flush=True)
        continue
    if line.startswith("threads "):
        n = int(line.split()[1])
        con.execute("RESET threads" if n == 0 else f"SET threads = {n}")
        print(json.dumps({"threads": n}), flush=True)
        continue
    t = time.perf_counter()
    rows = con.execute(spec["query"]).fetchall()
    secs = time.perf_counter() - t
    sums = []
    if rows:
        for i, v in enumerate(rows[0]):
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                sums.append(sum(r[i] for r in rows))
    print(json.dumps({"secs": secs, "rows": len(rows), "sums": sums}), flush=True)
