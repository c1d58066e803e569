// LeakSanitizer suppressions built into every fuzz harness (so a crash reproduces the same way
// from `make fuzz` and from a shell). libhdf5 1.10 (Debian 12) leaks small blocks on its own
// error paths, e.g. H5Dopen2 of a dataset whose layout message is damaged; lat cannot free
// them. Handles that lat leaves open are caught by expect_no_open_hdf5_objects instead.
extern "C" const char* __lsan_default_suppressions() { return "leak:libhdf5\n"; }
