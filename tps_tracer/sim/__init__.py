"""The simulated agent world; `world` has no framework imports, the rest needs the `demo` extra."""
