"""Ranking (pure: no I/O): the search's model, bounds, search columns, order and commands.

model (Budget, RunSpec, Filters, Candidate, Ranked, SearchOutcome),
bounds (the memory and sort bounds beside their SQL twins),
columns (the catalog's search columns computed from an analysis),
rank (the ranking loop), evaluate (one
candidate's fit, margin, context, quality and speed), order (the sort
keys) and commands (the llama-server, Ollama and LM Studio command
lines). The tensor-group statistics every layer shares are crawler.profile.groups, below this
package and the quality model. The catalog imports the types and SQL builders; nothing here
imports the catalog.
"""
