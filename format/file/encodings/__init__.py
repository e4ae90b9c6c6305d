"""Low-level codec primitives (FastLanes, FSST, RLE, general compression) used by Lance 2.1/2.2 pages."""
