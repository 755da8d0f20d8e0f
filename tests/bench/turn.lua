-- wrk script: POST one preview turn per request (tests/bench/serve-load.sh).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("HOSTPIPE_TOKEN")
wrk.body = '{"pipeline": "default", "message": "What does the config say?", "runner": "preview"}'

-- wrk prints non-2xx answers itself; add the percentiles in milliseconds.
done = function(summary, latency, requests)
  io.write(string.format("p50_ms=%.2f p99_ms=%.2f\n", latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
