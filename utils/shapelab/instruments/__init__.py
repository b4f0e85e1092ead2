"""Instruments: observe what Dynamo does, isolate each experiment, time, tabulate; each module tested."""
