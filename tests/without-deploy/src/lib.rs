//! The facade without its default features, tested as a program that reads no deploy
//! file uses it: see `tests/`.
