//! The stateright model of single-flight (SPEC.md §12). Filled in by the
//! model issue; for now it checks that the library it will drive links.

#[cfg(test)]
mod tests {
    /// The model drives the shipped library: it must be able to mint and read
    /// the library's tokens.
    #[test]
    fn links_the_library() {
        let token = single_flight::FencingToken::new(single_flight::Epoch::FIRST, 1).unwrap();
        assert_eq!(token.to_string().parse(), Ok(token));
    }
}
