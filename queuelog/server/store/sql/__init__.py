"""Each backend's own statements, declared once and named (procrastinate's queries.sql).

Table and column names in them are the code's own (tables.py); every value is a bound
parameter. Statements built from Core (shared by both backends) live in statements.py.
"""
