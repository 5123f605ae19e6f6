"""D2 Kit's tools around the reference scheduler: the CLI, failure drills, benchmarks, scorer and site.

`reference_impl/` is the scheduler a candidate reads; nothing in it imports this package.
"""
