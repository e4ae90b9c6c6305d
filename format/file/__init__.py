"""Lance data files: the container, the readers and writers of file formats
2.0, 2.1 and 2.2, and the codecs their pages use.

* :mod:`.datafile` - :class:`~.datafile.FileWriter` / :class:`~.datafile.FileReader`,
  whole data files (and the process cache of parsed tails);
* :mod:`.container` - the container every version shares (footer, column and
  page metadata, global buffers);
* :mod:`.io` - byte-range I/O: everything the file format reads goes through it;
* :mod:`.schema` - Arrow schema <-> Lance schema fields;
* :mod:`.v20` - file format 2.0's encoder and decoder;
* :mod:`.v21` - file formats 2.1/2.2, its ``read`` and ``write`` sides mirrored;
* :mod:`.encodings` - the codec primitives of 2.1/2.2 pages (FastLanes, FSST,
  RLE, general compression) and the C accelerator of FastLanes unpacking;
* :mod:`.dictionary`, :mod:`.blob` / :mod:`.blob_write`, :mod:`.utf8` -
  dictionary columns, blob columns, UTF-8 validation of decoded strings.

Nothing here imports :mod:`tessera.format.table`: a data file knows nothing
of the table it belongs to.  The sub-modules are imported by name.
"""
