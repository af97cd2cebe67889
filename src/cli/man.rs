//! `single-flight man` (SPEC.md §13.7): the man page single-flight(1), one
//! page for the command and all its subcommands, made with clap_mangen from
//! the definitions in mod.rs.
//!
//! clap_mangen renders a page per command, and a user should install one
//! file, so the page is put together here: clap_mangen's sections of the
//! command itself; a section per subcommand holding clap_mangen's sections of
//! that subcommand one level down (`.SS`) and its notes; the exit statuses of
//! every subcommand in EXIT STATUS; the examples; the version.

use clap::{Command, CommandFactory};
use clap_mangen::Man;
use clap_mangen::roff::{Roff, bold, roman};

use super::{Cli, EPILOGUES, Epilogue};

/// Rendering writes into a `Vec`, whose `Write` never fails.
const IN_MEMORY: &str = "writing to memory cannot fail";

/// Prints the page on stdout; returns the exit code.
pub fn man() -> u8 {
    super::print_text("the man page", page().as_bytes())
}

/// The whole page, in roff.
fn page() -> String {
    let mut command = page_command();
    // Built, the subcommands know their full names ("single-flight run"),
    // which their synopses begin with.
    command.build();
    let name = command.get_name().to_owned();
    let top = Man::new(command.clone());
    // The title line by hand: clap_mangen writes an empty date as nothing,
    // and the source then takes the date's place in the footer.
    let version = command.get_version().unwrap_or_default();
    let title = format!(
        ".TH {} 1 \"\" \"{name} {version}\" \"User Commands\"\n",
        name.to_uppercase()
    );
    let mut page = title.into_bytes();
    // No hyphenation: the page is full of options, paths and commands, which
    // a hyphen at the end of a line would change; and lines ragged on the
    // right, as a long path would otherwise stretch the spaces of the line
    // before it.
    let mut layout = Roff::default();
    layout.control("nh", []).control("ad", ["l"]);
    layout.to_writer(&mut page).expect(IN_MEMORY);
    top.render_name_section(&mut page).expect(IN_MEMORY);
    top.render_synopsis_section(&mut page).expect(IN_MEMORY);
    top.render_description_section(&mut page).expect(IN_MEMORY);
    top.render_options_section(&mut page).expect(IN_MEMORY);

    let mut statuses: Vec<(Vec<String>, &str)> = Vec::new();
    for subcommand in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        let full_name = format!("{name} {}", subcommand.get_name());
        let mut heading = Roff::default();
        heading.control("SH", [full_name.to_uppercase().as_str()]);
        heading.to_writer(&mut page).expect(IN_MEMORY);
        page.extend(demoted(&subcommand_sections(subcommand)).bytes());
        let Some(epilogue) = epilogue(subcommand) else {
            continue;
        };
        if let Some(notes) = epilogue.notes {
            let mut roff = Roff::default();
            headed_blocks(&mut roff, "SS", notes);
            roff.to_writer(&mut page).expect(IN_MEMORY);
        }
        // Subcommands with the same statuses share their rows.
        match statuses.last_mut() {
            Some((names, rows)) if *rows == epilogue.statuses => names.push(full_name),
            _ => statuses.push((vec![full_name], epilogue.statuses)),
        }
    }

    let mut end = Roff::default();
    end.control("SH", ["EXIT STATUS"]);
    for (names, rows) in statuses {
        end.control("SS", [names.join(", ").as_str()]);
        help_text(&mut end, rows);
    }
    if let Some(after) = command.get_after_long_help().or(command.get_after_help()) {
        headed_blocks(&mut end, "SH", &after.to_string());
    }
    end.to_writer(&mut page).expect(IN_MEMORY);
    top.render_version_section(&mut page).expect(IN_MEMORY);

    let page = String::from_utf8(page).expect("roff is made of UTF-8 strings");
    ascii(&once_preamble(&page))
}

/// The page with the roff crate's preamble (it defines the apostrophe that
/// every rendered text uses) once at its top, instead of before every part
/// rendered on its own.
fn once_preamble(page: &str) -> String {
    let preamble = Roff::default().render();
    format!("{preamble}{}", page.replace(&preamble, ""))
}

/// The command line as the page shows it. The `help` subcommand says no more
/// than `--help`. The default of `--dir` is left out: `--help` shows it
/// resolved for the user who asks (SPEC.md §13.1), which an installed page
/// would show every user; the option's text says how it is chosen.
fn page_command() -> Command {
    Cli::command()
        .disable_help_subcommand(true)
        .mut_subcommands(|subcommand| {
            subcommand.mut_args(|arg| {
                if arg.get_id() == "dir" {
                    arg.hide_default_value(true)
                } else {
                    arg
                }
            })
        })
}

/// The subcommand's entry in mod.rs's `EPILOGUES`; a test there holds every
/// subcommand to one.
fn epilogue(subcommand: &Command) -> Option<Epilogue> {
    EPILOGUES
        .iter()
        .find(|(name, _)| *name == subcommand.get_name())
        .map(|(_, epilogue)| *epilogue)
}

/// clap_mangen's synopsis, description and options of a subcommand, with
/// their section headings.
fn subcommand_sections(subcommand: &Command) -> String {
    let man = Man::new(subcommand.clone());
    let mut text = Vec::new();
    man.render_synopsis_section(&mut text).expect(IN_MEMORY);
    man.render_description_section(&mut text).expect(IN_MEMORY);
    man.render_options_section(&mut text).expect(IN_MEMORY);
    String::from_utf8(text).expect("roff is made of UTF-8 strings")
}

/// `roff` with its sections (`.SH`) turned into subsections (`.SS`). Only a
/// request begins a line with `.`: the roff crate escapes a text line that
/// would.
fn demoted(roff: &str) -> String {
    roff.lines()
        .map(|line| match line.strip_prefix(".SH ") {
            Some(heading) => format!(".SS {heading}\n"),
            None => format!("{line}\n"),
        })
        .collect()
}

/// Help text in blocks, separated by blank lines, of a heading (a line that
/// ends with `:`) and indented lines, as sections at `level` (`SH` or `SS`)
/// named by the heading in capitals. A block without a heading goes on in
/// the section before it; a test holds every block to having one.
fn headed_blocks(roff: &mut Roff, level: &str, text: &str) {
    for block in text.split("\n\n") {
        let body = match heading(block) {
            Some((heading, body)) => {
                roff.control(level, [heading.to_uppercase().as_str()]);
                body
            }
            None => block,
        };
        help_text(roff, body);
    }
}

/// A block's heading and body, when the block has that shape.
fn heading(block: &str) -> Option<(&str, &str)> {
    let (first, body) = block.split_once('\n')?;
    let heading = first.strip_suffix(':')?;
    let indented = body.lines().all(|line| line.starts_with(' '));
    (!heading.starts_with(' ') && indented).then_some((heading, body))
}

/// One piece of help text, as `--help` lays it out for a terminal of 80
/// columns (exit.rs, mod.rs) and the page lays it out again for the reader's.
#[derive(Debug, PartialEq, Eq)]
enum Piece<'a> {
    /// Lines of prose, indented two spaces: one paragraph.
    Paragraph(String),
    /// `  TERM  TEXT`, a term and its text two or more spaces apart, with the
    /// text's further lines indented deeper.
    Definition(&'a str, String),
    /// A line that begins with the command's name: a command to type,
    /// shown alone on its line.
    Command(&'a str),
}

/// The pieces of the lines of a block.
fn pieces(body: &str) -> Vec<Piece<'_>> {
    let mut pieces: Vec<Piece<'_>> = Vec::new();
    for line in body.lines() {
        let text = line.trim_start();
        let indent = line.len() - text.len();
        if text.starts_with("single-flight ") {
            pieces.push(Piece::Command(text));
            continue;
        }
        let deeper = indent > 2;
        match (pieces.last_mut(), text.split_once("  ")) {
            (Some(Piece::Definition(_, more) | Piece::Paragraph(more)), _) if deeper => {
                more.push(' ');
                more.push_str(text);
            }
            (_, Some((term, definition))) if !deeper => {
                pieces.push(Piece::Definition(term, definition.trim_start().to_owned()));
            }
            (Some(Piece::Paragraph(more)), None) => {
                more.push(' ');
                more.push_str(text);
            }
            _ => pieces.push(Piece::Paragraph(text.to_owned())),
        }
    }
    pieces
}

/// The lines of a block's body in roff: paragraphs filled, definitions as
/// tagged paragraphs, commands alone on their lines.
fn help_text(roff: &mut Roff, body: &str) {
    let mut after_command = false;
    for piece in pieces(body) {
        let command = matches!(piece, Piece::Command(_));
        match piece {
            Piece::Paragraph(text) => {
                roff.control("PP", []).text([roman(text)]);
            }
            Piece::Definition(term, text) => {
                roff.control("TP", [])
                    .text([bold(term)])
                    .text([roman(text)]);
            }
            Piece::Command(line) => {
                if !after_command {
                    roff.control("PP", []);
                }
                roff.text([roman(line)]).control("br", []);
            }
        }
        after_command = command;
    }
}

/// The page in ASCII: every other character as groff's `\[uXXXX]`, which
/// every formatter reads whatever the locale (the help says `§` and `÷`).
fn ascii(page: &str) -> String {
    let mut out = String::with_capacity(page.len());
    for character in page.chars() {
        if character.is_ascii() {
            out.push(character);
        } else {
            out.push_str(&format!("\\[u{:04X}]", u32::from(character)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every note of every subcommand, and the examples, become sections of
    /// their own instead of running on in the section before them.
    #[test]
    fn every_note_has_a_heading() {
        let command = Cli::command();
        let mut texts: Vec<String> = EPILOGUES
            .iter()
            .filter_map(|(_, epilogue)| epilogue.notes.map(str::to_owned))
            .collect();
        texts.extend(command.get_after_help().map(|after| after.to_string()));
        for text in texts {
            for block in text.split("\n\n") {
                assert!(heading(block).is_some(), "no heading: {block:?}");
            }
        }
    }

    #[test]
    fn help_text_becomes_paragraphs_definitions_and_commands() {
        let body = "  0                 it went well, and the line
                    goes on
  SINGLE_FLIGHT_DIR  the default for --dir
  Prose that runs
  over two lines:
    single-flight status --json
  single-flight run --key k -- true";
        assert_eq!(
            pieces(body),
            [
                Piece::Definition("0", "it went well, and the line goes on".into()),
                Piece::Definition("SINGLE_FLIGHT_DIR", "the default for --dir".into()),
                Piece::Paragraph("Prose that runs over two lines:".into()),
                Piece::Command("single-flight status --json"),
                Piece::Command("single-flight run --key k -- true"),
            ]
        );
    }

    #[test]
    fn sections_become_subsections() {
        assert_eq!(
            demoted(".SH OPTIONS\n\\&.SH text\n.TP\n"),
            ".SS OPTIONS\n\\&.SH text\n.TP\n"
        );
    }

    #[test]
    fn the_preamble_comes_once() {
        let preamble = Roff::default().render();
        assert!(!preamble.is_empty());
        assert_eq!(page().matches(&preamble).count(), 1);
        assert!(page().starts_with(&preamble));
    }

    #[test]
    fn the_page_is_ascii() {
        assert_eq!(ascii("§13.7 ÷ a"), "\\[u00A7]13.7 \\[u00F7] a");
        assert!(page().is_ascii());
    }
}
